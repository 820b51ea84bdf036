"""Helpers shared by the test modules (no test module imports another).

- ``agents``: the agent commands tests run (the demo agent, tests/agents/, scripts)
- ``live``: a relay in this event loop on 127.0.0.1:0, and signed tickets
- ``cli``: ``acp-relay`` as a subprocess (``serve``, ``RelayRun``, ``run_cli``)
- ``env``: environments for subprocesses (``clean_env``, ``secret_env``, ``connect_env``)
- ``connect``: ``acp-relay connect`` as its editor runs it
- ``clients``: ACP SDK clients that record what the agent sent
- ``waiting``: ``until`` (the one poller), ``until_gone``, ``until_steady``
- ``processes``: ``/proc``: alive, children, fds, memory, bytes written
- ``http``: raw HTTP/1.1 on loopback (``http_get``, upgrade requests, ``exchange``)
- ``sockets``: WebSocket outcomes (``refused``, ``closed_with``, ``round_trip``)
- ``servers``: loopback servers that are not relays (silent, plain HTTP, TLS echo, hostile)
- ``netcut``: a TCP proxy a test can cut; ``resume``: a client of the resume profile
- ``audit``: the log audit and its fixtures; ``figures``: measured figures
- ``reliability``: the fault suite's workloads that its soak runs longer
- ``config_docs``: rewrites docs/configuration.md's option tables
"""
