"""Small agent programs with known misbehaviours, run as real processes by the tests."""
