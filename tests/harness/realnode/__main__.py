"""`python -m tests.harness.realnode COMMAND`: the real one-node Kubernetes for users and tests.

build                  the node's binaries from Go modules (minutes cold, instant when cached)
up [IMAGE ...]         build what is missing, start the node detached and import the images
                       (default: every image `make images` builds); `make cluster-up`
down                   delete the workloads, stop the daemons, put the host back; `make cluster-down`
status                 the daemons and state.json
kubectl ARGS...        kubectl with the admin kubeconfig
env                    shell exports: KUBECONFIG and PATH with kubectl and helm
selftest               start, a pod, DNS, a Service, a volume, no route off the machine, teardown, and
                       the host compared with its state before
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from tests.harness.realnode import binaries, daemons, node, selftest
from tests.harness.realnode import settings as s


def _project_images() -> list[str]:
    from tests.harness import images

    built = images.ensure_images(list(images.ALL_IMAGES))
    return list(built)


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("status", [])
    if command == "build":
        binaries.build()
        print(binaries.summary_line())
    elif command == "up":
        if info := node.running_info():
            print(f"a real node is already running: export KUBECONFIG={info['kubeconfig']}")
            return 0
        binaries.build()
        node.start(args or _project_images(), attached=False)
        print(f"\nexport KUBECONFIG={s.ADMIN_KUBECONFIG}\nexport PATH={s.BIN}:$PATH")
    elif command == "down":
        node.teardown()
    elif command == "status":
        for name in daemons.ORDER:
            print(f"{name:24} {daemons.pid_of(name) or '-'}")
        if s.STATE_FILE.exists():
            print(json.dumps(json.loads(s.STATE_FILE.read_text()), indent=1))
    elif command == "kubectl":
        os.execv(str(s.BIN / "kubectl"), [*node.kubectl_argv(), *args])
    elif command == "env":
        print(f"export KUBECONFIG={shlex.quote(str(s.ADMIN_KUBECONFIG))}")
        print(f"export PATH={shlex.quote(str(s.BIN))}:$PATH")
    elif command == "selftest":
        return selftest.run(_project_images())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (RuntimeError, TimeoutError) as exc:
        sys.exit(f"real node: {exc}")
