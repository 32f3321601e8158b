"""The Kubernetes manifests parse and agree with the code: ports, variables, probes, roles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import api.feed  # noqa: F401  (registers the gateway's feed metrics)
from services.common.config import OTHER_VARIABLES, VARIABLES, Settings
from services.common.metrics import REGISTRY
from services.common.serve import APP_FACTORIES, PORT_VARIABLES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
DEFAULT_PORTS = {name: Settings().port_of(name) for name in APP_FACTORIES}


def _docs() -> list[dict]:
    docs: list[dict] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _by_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _docs() if d["kind"] == kind}


def test_every_manifest_parses_and_kustomization_lists_them():
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    files = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == files
    assert all("kind" in d and "apiVersion" in d for d in _docs())


@pytest.mark.parametrize("service", sorted(APP_FACTORIES))
def test_each_service_has_deployment_service_and_pdb_on_its_port(service):
    name = f"mesa-{service}"
    deployment = _by_kind("Deployment")[name]
    svc = _by_kind("Service")[name]
    assert name in _by_kind("PodDisruptionBudget")
    port = DEFAULT_PORTS[service]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve", service]
    assert container["ports"][0]["containerPort"] == port
    assert svc["spec"]["ports"][0]["port"] == port
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[PORT_VARIABLES[service]] == str(port)
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": port}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_autoscaling_for_gateway_and_engine():
    hpas = _by_kind("HorizontalPodAutoscaler")
    assert sorted(hpas) == ["mesa-engine", "mesa-gateway"]
    for name, hpa in hpas.items():
        assert hpa["spec"]["scaleTargetRef"]["name"] == name


def test_every_configured_variable_is_known_and_parses():
    known = set(VARIABLES) | set(OTHER_VARIABLES)
    config = _by_kind("ConfigMap")["mesa-config"]["data"]
    secrets = _by_kind("Secret")["mesa-secrets"]["stringData"]
    redis = _by_kind("Secret")["mesa-redis"]["stringData"]
    names = set(config) | set(secrets) | set(redis)
    for d in _by_kind("Deployment").values():
        names |= {e["name"] for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
    unknown = names - known
    assert not unknown
    for name, value in config.items():
        _, parse, _ = VARIABLES[name]
        parse(name, value)
    for service in ("ledger", "engine", "matchmaking"):
        assert config[f"MESA_{service.upper()}_URL"].endswith(f":{DEFAULT_PORTS[service]}")
    for name, value in redis.items():
        VARIABLES[name][1](name, value)


def test_only_the_gateway_reads_the_optional_redis_secret():
    readers = {}
    for name, d in _by_kind("Deployment").items():
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["name"] == "mesa-redis":
                readers[name] = (e["name"], ref["key"], ref.get("optional"))
    assert readers == {"mesa-gateway": ("MESA_REDIS_URL", "MESA_REDIS_URL", True)}


def test_migrations_job_runs_mesa_migrate():
    job = _by_kind("Job")["mesa-migrations"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]


def test_only_the_gateway_is_exposed():
    ingress = _by_kind("Ingress")["mesa-gateway"]
    backends = {
        p["backend"]["service"]["name"]
        for rule in ingress["spec"]["rules"]
        for p in rule["http"]["paths"]
    }
    assert backends == {"mesa-gateway"}


def test_dockerfile_is_multi_stage_non_root_with_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2
    assert re.search(r"^USER 10001", text, re.M)
    assert "HEALTHCHECK" in text and "/health" in text


def test_alerts_and_dashboard_use_metrics_the_code_exports():
    exported = {m.name for m in REGISTRY.collect()}
    alerts = yaml.safe_load((DEPLOY / "monitoring" / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in alerts["spec"]["groups"] for r in g["rules"]]
    dashboard = json.loads((DEPLOY / "monitoring" / "dashboard.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for expr in exprs:
        for metric in re.findall(r"\b(mesa_[a-z_]+)", expr):
            base = re.sub(r"_(total|bucket|sum|count)$", "", metric)
            assert base in exported, f"{metric} in {expr!r} is not exported"
