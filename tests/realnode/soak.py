"""`make e2e-real`: the word count example on the real node for many minutes of the operations a cluster
sees, under steady input, then an audit of the committed output.

Every 10-25 s one action at random: a container SIGKILLed inside its pod, a pod deleted, `kubectl scale`
to 1-4 replicas, a rolling upgrade to the other image tag, the kubelet killed and restarted. After each,
the pods are awaited Ready. At the end every input must be counted exactly once and no count may ever have
gone down (read_committed, exactly_once_v2). The bounded version of each action runs in CI
(tests/realnode/test_wordcount_lifecycle.py); this runs them for as long as asked:

    python -m tests.realnode.soak --minutes 20 [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import time
from collections import Counter

from tests.harness.realnode import node
from tests.harness.realnode.images_store import ctr, docker_binary, import_images
from tests.harness.realnode_fixtures import RealNode, node_session
from tests.realnode.cluster import (
    ROOT,
    CountAudit,
    SteadyInput,
    condition,
    deploy_kafka,
    input_word_counts,
    install_operator,
    pod_names,
    wait_for,
)

NAMESPACE = "kappaflow-examples"
APP = "wordcount"
SELECTOR = "kappaflow.io/streamapp=wordcount,!job-name"
TAGS = ("kappaflow-examples:0.1.0", "kappaflow-examples:0.1.1")


def _pods_ready(n: RealNode) -> bool:
    pods = json.loads(n.kubectl("-n", NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json"))["items"]
    want = n.get("statefulset", APP, NAMESPACE)["spec"]["replicas"]
    ready = [p for p in pods if (c := condition(p, "Ready")) and c["status"] == "True"]
    return len(pods) == len(ready) == want


def _act(n: RealNode, rng: random.Random, image: list[str]) -> str:
    pods = pod_names(n, NAMESPACE, SELECTOR)
    action = rng.choice(["sigkill", "delete", "scale", "upgrade", "kubelet"])
    if action == "sigkill" and pods:
        pod = rng.choice(pods)
        status = n.get("pod", pod, NAMESPACE)["status"]["containerStatuses"][0]
        ctr("tasks", "kill", "-s", "SIGKILL", str(status["containerID"]).split("://", 1)[1], check=False)
        return f"SIGKILL {pod}"
    if action == "delete" and pods:
        pod = rng.choice(pods)
        n.kubectl("-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
        return f"delete {pod}"
    if action == "scale":
        replicas = rng.randint(1, 4)
        n.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, f"--replicas={replicas}")
        return f"scale to {replicas}"
    if action == "upgrade":
        image[0] = TAGS[1] if image[0] == TAGS[0] else TAGS[0]
        patch = json.dumps({"spec": {"image": image[0]}})
        n.kubectl("-n", NAMESPACE, "patch", "streamapp", APP, "--type=merge", "-p", patch)
        return f"upgrade to {image[0]}"
    node.restart_kubelet()
    return "kubelet restarted"


def soak(n: RealNode, minutes: float, seed: int) -> None:
    kafka = deploy_kafka(n)
    install_operator(n, replicas=2)
    subprocess.run([docker_binary(), "tag", TAGS[0], TAGS[1]], check=True)
    import_images([TAGS[1]], node.log)
    n.kubectl("apply", "-k", str(ROOT / "examples" / "k8s"))
    wait_for("the example Ready", lambda: _pods_ready(n), 300, interval=1)
    expected: Counter[str] = input_word_counts(kafka.host_bootstrap, "wordcount-input")
    audit = CountAudit(kafka.host_bootstrap, "wordcount-output")
    rng, image, actions = random.Random(seed), [TAGS[0]], Counter[str]()
    end = time.monotonic() + minutes * 60
    try:
        with SteadyInput(kafka.host_bootstrap, "wordcount-input", expected) as steady:
            while time.monotonic() < end:
                time.sleep(rng.uniform(10, 25))
                what = _act(n, rng, image)
                actions[what.split()[0]] += 1
                started = time.monotonic()
                wait_for(f"pods Ready after {what}", lambda: _pods_ready(n), 300, interval=1)
                took = time.monotonic() - started
                print(f"[soak] {what}: Ready again in {took:.1f}s, {steady.sent} lines sent")
                audit.poll(0.5)
        audit.wait_exact(expected, timeout=300)
        print(f"[soak] exact: {sum(expected.values())} words counted once each; actions {dict(actions)}")
    finally:
        audit.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"[soak] {args.minutes} minutes, seed {args.seed}")
    with node_session() as n:
        soak(n, args.minutes, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
