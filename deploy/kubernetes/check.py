"""What the schemas cannot see in the rendered manifests: that the pieces
point at each other. Run by .ci/image on `kubectl kustomize` output:

    python3 deploy/kubernetes/check.py rendered.yaml

Checks, each failing with the object and field named:
- the Service, PodDisruptionBudget and ServiceMonitor select the pods'
  labels, and the Deployment's selector matches its own template;
- every port a Service, probe or ServiceMonitor names is a container port;
- the HorizontalPodAutoscaler targets the Deployment;
- the config volume is a ConfigMap of the same rendering, mounted read-only
  at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, and its rules parse as YAML
  with a `domain`;
- the securityContext the image needs: non-root, read-only root filesystem,
  no capabilities, seccomp RuntimeDefault, no privilege escalation.

Needs PyYAML (installed with kubernetes-validate).
"""

import sys

import yaml


def fail(message):
    sys.exit(f"deploy/kubernetes: {message}")


def selects(selector, labels, what):
    missing = {k: v for k, v in selector.items() if labels.get(k) != v}
    if not selector or missing:
        fail(f"{what} does not select the pods (labels {labels}, unmatched {missing})")


def main(path):
    with open(path) as rendered:
        objects = [o for o in yaml.safe_load_all(rendered) if o]
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    (deployment,) = by_kind["Deployment"]
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    selects(deployment["spec"]["selector"]["matchLabels"], labels, "the Deployment")
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}

    def port_named(port, what):
        if isinstance(port, str) and port not in ports:
            fail(f"{what} names port {port!r}, not one of {sorted(ports)}")
        if isinstance(port, int) and port not in ports.values():
            fail(f"{what} names port {port}, not a container port")

    for service in by_kind["Service"]:
        selects(service["spec"]["selector"], labels, f"Service {service['metadata']['name']}")
        for port in service["spec"]["ports"]:
            port_named(port["targetPort"], f"Service port {port['name']}")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        selects(pdb["spec"]["selector"]["matchLabels"], labels, "the PodDisruptionBudget")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe not in container:
            fail(f"the container has no {probe}")
        port_named(container[probe]["httpGet"]["port"], probe)
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        target = hpa["spec"]["scaleTargetRef"]
        if (target["kind"], target["name"]) != ("Deployment", deployment["metadata"]["name"]):
            fail(f"the HorizontalPodAutoscaler targets {target}")
    service_labels = [s["metadata"].get("labels", {}) for s in by_kind["Service"]]
    service_ports = {p["name"] for s in by_kind["Service"] for p in s["spec"]["ports"]}
    for monitor in by_kind.get("ServiceMonitor", []):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        if not any(all(l.get(k) == v for k, v in wanted.items()) for l in service_labels):
            fail(f"the ServiceMonitor selects no Service ({wanted})")
        for endpoint in monitor["spec"]["endpoints"]:
            if endpoint["port"] not in service_ports:
                fail(f"the ServiceMonitor scrapes port {endpoint['port']!r}, not a Service port")

    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    config_dir = f"{env.get('RUNTIME_ROOT')}/{env.get('RUNTIME_SUBDIRECTORY')}/config"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mount = next((m for m in mounts.values() if m["mountPath"] == config_dir), None)
    if mount is None or not mount.get("readOnly"):
        fail(f"nothing is mounted read-only at {config_dir}")
    config_map_name = volumes[mount["name"]]["configMap"]["name"]
    config_maps = {c["metadata"]["name"]: c for c in by_kind["ConfigMap"]}
    if config_map_name not in config_maps:
        fail(f"the config volume names ConfigMap {config_map_name!r}, not in the rendering")
    for name, text in config_maps[config_map_name]["data"].items():
        rules = yaml.safe_load(text)
        if not isinstance(rules, dict) or not rules.get("domain"):
            fail(f"{config_map_name}/{name} has no domain")

    security = container["securityContext"]
    expected = {
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
    }
    for field, value in expected.items():
        if security.get(field) is not value:
            fail(f"the container's securityContext.{field} is not {value}")
    if security.get("capabilities", {}).get("drop") != ["ALL"]:
        fail("the container does not drop all capabilities")
    seccomp = security.get("seccompProfile") or pod["spec"]["securityContext"].get("seccompProfile")
    if (seccomp or {}).get("type") != "RuntimeDefault":
        fail("seccomp is not RuntimeDefault")
    print(f"deploy/kubernetes: {len(objects)} objects consistent ({', '.join(sorted(by_kind))})")


if __name__ == "__main__":
    main(sys.argv[1])
