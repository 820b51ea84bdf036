"""deploy/kubernetes/: the manifests against Kubernetes' schemas, yamllint, and each other.

No cluster: every document is validated against the pinned Kubernetes version's schemas
(kubernetes-validate, strict: an unknown field fails), linted with yamllint, and checked
for what holds the box together (the relay's options, ports, probes, the secret's path,
the grace, the labels the Service, the NetworkPolicy and the fleet's proxy select by).
The fleet's Caddyfile runs for real in Debian's Caddy on loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from relay.commands.serve import SHUTDOWN_MARGIN
from relay.config.settings import resolve, unknown_env_names
from tests.support.processes import stop
from tests.support.sockets import free_port
from tests.system import require_packages

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
FLEET_CADDYFILE = KUBERNETES / "Caddyfile.fleet"
KUBERNETES_VERSION = "1.35.0"  # the schemas the manifests are checked against
ACP_PORT, METRICS_PORT = 8765, 9464

Doc = dict[str, Any]


def manifest_files() -> list[Path]:
    return sorted(KUBERNETES.glob("*.yaml"))


def documents() -> list[Doc]:
    """Every document of every manifest, in order."""
    return [doc for path in manifest_files() for doc in yaml.safe_load_all(path.read_text())]


def the(kind: str) -> Doc:
    """The one document of ``kind``."""
    (found,) = [doc for doc in documents() if doc["kind"] == kind]
    return found


def pod_spec() -> Doc:
    spec: Doc = the("Deployment")["spec"]["template"]["spec"]
    return spec


def container() -> Doc:
    (relay,) = pod_spec()["containers"]
    found: Doc = relay
    return found


def relay_env() -> dict[str, str]:
    """The relay's environment in a box: the image's ACP_RELAY_* settings, then the pod's."""
    image = dict(re.findall(r"\b(ACP_RELAY_\w+)=(\S+)", (ROOT / "Dockerfile").read_text()))
    pod = {e["name"]: e["value"] for e in container()["env"] if "value" in e}
    return {**image, **pod}


def image_uid() -> int:
    match = re.search(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert match is not None
    return int(match.group(1))


def port_named(name: str) -> int:
    (port,) = [p["containerPort"] for p in container()["ports"] if p["name"] == name]
    assert isinstance(port, int)
    return port


# -- schemas and lint ---------------------------------------------------------------------


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: p.name)
def test_every_manifest_is_valid_for_the_pinned_kubernetes(path: Path) -> None:
    """Each document validates against Kubernetes' schemas, strictly (no unknown field)."""
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_manifests_pass_yamllint() -> None:
    """yamllint, with the repository's .yamllint.yaml, finds nothing in any manifest."""
    config = YamlLintConfig(file=str(ROOT / ".yamllint.yaml"))
    problems = [
        f"{path.name}:{problem.line}: {problem.message}"
        for path in [*manifest_files(), ROOT / ".yamllint.yaml"]
        for problem in linter.run(path.read_text(), config, str(path))
    ]
    assert problems == []


def test_the_schema_check_catches_a_misspelt_field() -> None:
    """The validation is strict: a field Kubernetes does not know fails it."""
    deployment = the("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


# -- the box --------------------------------------------------------------------------------


def test_the_relay_settings_are_its_options() -> None:
    """Every ACP_RELAY_* variable of the pod names a relay option, with a value it takes."""
    env = relay_env()
    assert unknown_env_names(env) == ()
    settings = resolve({}, env, None, cwd="/")
    assert settings.port == ACP_PORT == port_named("acp")
    assert settings.metrics_listen == ("0.0.0.0", METRICS_PORT)
    assert settings.audience == "box-17"


def test_one_pod_per_box_replaced_not_rolled() -> None:
    """replicas 1 and Recreate: two pods never share the box's ReadWriteOnce workspace."""
    spec = the("Deployment")["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    assert the("PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_the_grace_period_outlasts_the_relays_shutdown() -> None:
    """Kubernetes waits longer than the relay takes to stop its agents after SIGTERM."""
    kill_grace = float(relay_env()["ACP_RELAY_KILL_GRACE"])
    assert pod_spec()["terminationGracePeriodSeconds"] > kill_grace + SHUTDOWN_MARGIN


def test_probes_ask_healthz_on_the_relays_port() -> None:
    """Liveness and readiness are GET /healthz on the ACP port."""
    for probe in ("livenessProbe", "readinessProbe"):
        assert container()[probe]["httpGet"] == {"path": "/healthz", "port": "acp"}


def test_the_secret_is_a_file_where_the_image_looks_for_it() -> None:
    """The Secret's key lands at the image's ACP_RELAY_SECRET_FILE, readable by no other."""
    secret_file = Path(relay_env()["ACP_RELAY_SECRET_FILE"])
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == "secret"]
    (volume,) = [v for v in pod_spec()["volumes"] if v["name"] == "secret"]
    (item,) = volume["secret"]["items"]
    assert Path(mount["mountPath"]) / item["path"] == secret_file
    assert mount["readOnly"] is True
    assert volume["secret"]["defaultMode"] & 0o007 == 0
    assert volume["secret"]["secretName"] == "acp-relay-box-17"
    context = pod_spec()["securityContext"]
    assert context["fsGroup"] == context["runAsUser"] == image_uid()


def test_the_workspace_is_the_boxs_volume() -> None:
    """The image's workspace is the box's persistent volume; no cluster credential is mounted."""
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == "workspace"]
    assert mount["mountPath"] == relay_env()["ACP_RELAY_WORKSPACE"]
    (volume,) = [v for v in pod_spec()["volumes"] if v["name"] == "workspace"]
    claim = the("PersistentVolumeClaim")["metadata"]["name"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    assert pod_spec()["automountServiceAccountToken"] is False


def test_the_microvm_runtime_class_is_the_one_defined() -> None:
    """The pod asks for the RuntimeClass runtimeclass.yaml defines, a Kata handler."""
    runtime = the("RuntimeClass")
    assert pod_spec()["runtimeClassName"] == runtime["metadata"]["name"]
    assert runtime["handler"].startswith("kata")


def test_prometheus_is_pointed_at_the_metrics_port() -> None:
    """The scrape annotations name the --metrics-listen port, never the ACP one."""
    annotations = the("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == port_named("metrics") == METRICS_PORT


def test_the_service_reaches_the_box_under_the_name_the_proxy_dials() -> None:
    """The Service selects the pod, is named acp-relay-<box>, and carries both ports."""
    service = the("Service")
    labels = the("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["metadata"]["name"] == f"acp-relay-{labels['acp-relay/box']}"
    ports = {p["targetPort"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == {"acp": ACP_PORT, "metrics": METRICS_PORT}


def allowed_ports(policy: Doc, app: str) -> set[int]:
    """The ports a rule of ``policy`` opens to pods labelled app.kubernetes.io/name=app."""
    return {
        port["port"]
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
        if peer.get("podSelector", {}).get("matchLabels") == {"app.kubernetes.io/name": app}
        for port in rule["ports"]
    }


def test_the_network_policy_opens_each_port_to_whom_it_serves() -> None:
    """The proxy reaches the ACP port, Prometheus the metrics port, the supervisor both."""
    policy = the("NetworkPolicy")
    labels = the("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert allowed_ports(policy, "acp-relay-proxy") == {ACP_PORT}
    assert allowed_ports(policy, "prometheus") == {METRICS_PORT}
    assert allowed_ports(policy, "acp-relay-supervisor") == {ACP_PORT, METRICS_PORT}
    assert len(policy["spec"]["ingress"]) == 3  # nobody else, other boxes included


def test_the_supervisor_may_scale_boxes_and_nothing_more() -> None:
    """The supervisor's Role reads Deployments and changes their scale only."""
    rules = the("Role")["rules"]
    assert {(r["resources"][0], tuple(r["verbs"])) for r in rules} == {
        ("deployments", ("get", "list", "watch")),
        ("deployments/scale", ("get", "patch", "update")),
    }


# -- the fleet's proxy ----------------------------------------------------------------------


def caddy_env(port: int, home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "CADDY_GLOBAL_OPTIONS": (
            f"admin off\nskip_install_trust\nauto_https disable_redirects\nhttps_port {port}"
        ),
        "FLEET_DOMAIN": "fleet.test",
        "FLEET_SITE_OPTIONS": "bind 127.0.0.1\ntls internal",
    }


@pytest.mark.slow
def test_the_fleet_caddyfile_is_valid_and_formatted(tmp_path: Path) -> None:
    """Caddy adapts and validates Caddyfile.fleet, and `caddy fmt` leaves it as it is."""
    require_packages("caddy", commands=("caddy",))
    env = caddy_env(free_port(), tmp_path)
    command = ["caddy", "adapt", "--adapter", "caddyfile", "--config", str(FLEET_CADDYFILE)]
    adapted = subprocess.run(
        [*command, "--validate"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert adapted.returncode == 0, adapted.stderr
    formatted = subprocess.run(
        ["caddy", "fmt", str(FLEET_CADDYFILE)], capture_output=True, text=True, timeout=60
    )
    assert formatted.stdout == FLEET_CADDYFILE.read_text()


@pytest.fixture
def fleet_proxy(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """Caddy running Caddyfile.fleet on 127.0.0.1 (internal CA); its port and data folder."""
    require_packages("caddy", commands=("caddy",))
    port = free_port()
    log = tmp_path / "caddy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["caddy", "run", "--adapter", "caddyfile", "--config", str(FLEET_CADDYFILE)],
            env=caddy_env(port, tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 20
        root = tmp_path / "data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"
        while not root.exists() or b"serving initial configuration" not in log.read_bytes():
            assert proc.poll() is None, f"caddy exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"caddy not ready: {log.read_text()}"
            time.sleep(0.1)
        yield port, tmp_path
    finally:
        stop(proc)


async def get_through_proxy(port: int, home: Path, host: str, path: str, extra: str = "") -> int:
    """GET ``path`` from the proxy as ``host`` (SNI and Host), trusting its internal CA.

    ``extra``: more header lines, each ending in CRLF.
    """
    root = home / "data" / "caddy" / "pki" / "authorities" / "local" / "root.crt"
    context = ssl.create_default_context(cafile=str(root))
    async with asyncio.timeout(15):
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname=host
        )
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n".encode()
            )
            status = await reader.readline()
        finally:
            writer.close()
            with suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
    return int(status.split()[1])


@pytest.mark.slow
async def test_the_fleet_proxy_dials_the_box_the_host_names(
    fleet_proxy: tuple[int, Path],
) -> None:
    """box-N.<domain>/acp goes to acp-relay-box-N's Service; nothing else goes anywhere."""
    port, home = fleet_proxy
    # No cluster DNS here: the dial fails (502), and Caddy's error log names where it dialled.
    tickets = "Authorization: Bearer T1P\r\nSec-WebSocket-Protocol: acp.v1, acp-ticket.T2P\r\n"
    assert (
        await get_through_proxy(port, home, "box-17.fleet.test", "/acp?ticket=T0P", tickets) == 502
    )
    for host, path in [
        ("box-17.fleet.test", "/busy"),
        ("box-17.fleet.test", "/metrics"),
        ("evil.fleet.test", "/acp"),
        ("box-17x.fleet.test", "/acp"),
    ]:
        assert await get_through_proxy(port, home, host, path) == 404, (host, path)
    logged = (home / "caddy.log").read_text()
    failed_dials = [
        entry["msg"]
        for entry in map(json.loads, filter(None, logged.splitlines()))
        if entry.get("logger", "").startswith("http.log.error")
    ]
    assert len(failed_dials) == 1, failed_dials
    assert "acp-relay-box-17.acp-relay.svc.cluster.local" in failed_dials[0]
    for ticket in ("T0P", "T1P", "T2P", "ticket=", "Bearer ", "acp-ticket."):
        assert ticket not in logged, ticket


@pytest.mark.slow
def test_the_fleet_caddyfile_without_fleet_domain_says_to_set_it(tmp_path: Path) -> None:
    """Without FLEET_DOMAIN, Caddy stops naming FLEET_DOMAIN and what to set."""
    require_packages("caddy", commands=("caddy",))
    env = caddy_env(free_port(), tmp_path)
    del env["FLEET_DOMAIN"]
    result = subprocess.run(
        ["caddy", "run", "--config", str(FLEET_CADDYFILE)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "FLEET_DOMAIN-is-not-set:set-it-to-the-boxes-parent-domain" in result.stderr
