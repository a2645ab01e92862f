"""Checks deploy/k8s: every manifest validates (strictly: no unknown field) against the Kubernetes API
schemas of a pinned version, the kustomization lists every manifest, and the Deployment drains
within its termination grace period.

Run with an interpreter that has `kubernetes-validate` (and so PyYAML):
    python tests/k8s_validate.py [KUBERNETES_VERSION]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import kubernetes_validate
import yaml

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
# `codegym serve`'s default shutdown_grace_ms (src/server/mod.rs): in-flight work after draining.
SHUTDOWN_GRACE_SECS = 30


def validate(doc: dict, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def main() -> int:
    version = sys.argv[1] if len(sys.argv) > 1 else "1.37.0"
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    if listed != present:
        print(
            f"kustomization.yaml lists {sorted(listed)}, deploy/k8s holds {sorted(present)}"
        )
        return 1
    docs = {}
    for name in sorted(listed):
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            validate(doc, version)
            docs[(doc["kind"], name)] = doc
            print(
                f"{name}: {doc['kind']}/{doc['metadata']['name']} valid for Kubernetes {version}"
            )

    # The validator is live: a field the API does not have is refused.
    deployment = next(d for (kind, _), d in docs.items() if kind == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["argz"] = ["serve"]
    try:
        validate(broken, version)
    except kubernetes_validate.ValidationError:
        pass
    else:
        print("an unknown field passed validation: the validator checks nothing")
        return 1

    # Draining: --drain-secs, then at most the shutdown grace, must end before the kubelet's SIGKILL.
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    if "--drain-secs" not in args:
        print(
            "the Deployment does not pass --drain-secs: pods would stop at once on SIGTERM"
        )
        return 1
    drain = int(args[args.index("--drain-secs") + 1])
    grace = int(pod["terminationGracePeriodSeconds"])
    if not (0 < drain and drain + SHUTDOWN_GRACE_SECS < grace):
        print(
            f"--drain-secs {drain} + {SHUTDOWN_GRACE_SECS} s of shutdown grace must end before {grace} s"
        )
        return 1
    probe = pod["containers"][0]["readinessProbe"]
    if probe["periodSeconds"] * probe["failureThreshold"] > drain:
        print(
            f"the readiness probe takes longer than the {drain} s drain to take the pod out of the Service"
        )
        return 1
    print(
        f"drain {drain} s + grace {SHUTDOWN_GRACE_SECS} s < terminationGracePeriodSeconds {grace} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
