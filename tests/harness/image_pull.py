"""Image pulls as the fake kubelet plays them: which images it can "pull", and how a failed pull looks.

The fake kubelet runs a pod as one local process, so there is no image to pull; a test says which image
references exist (`Pullable`: a predicate on the reference, by default every one). For a pod with a
reference that does not exist, the kubelet does what a real one (containerd runtime) does:

- it starts none of the pod's containers (the fake launches a pod as one process, so one missing image
  keeps the whole pod from starting; a real kubelet would still start the pod's other containers);
- the pod stays `Pending`, not ready, with a pod IP (the sandbox exists before images are pulled);
- each container whose image is missing is `waiting` with reason `ErrImagePull` right after a pull
  attempt, then `ImagePullBackOff` until the next attempt; the back-off doubles from
  `pull_backoff_seconds` up to 300 s (the kubelet's own 10 s .. 5 min); the messages are the kubelet's;
- the others wait with reason `ContainerCreating`;
- once every reference can be pulled (a pod's container image is mutable), the next pass starts the pod.

Images are checked before a pod starts; a running pod whose image is changed is not stopped for it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Whether an image reference exists in the registry the test plays.
Pullable = Callable[[str], bool]

#: The kubelet's image pull back-off cap.
MAX_BACKOFF_S = 300.0


def every_image(_image: str) -> bool:
    """The default: every reference can be pulled."""
    return True


def err_image_pull_message(image: str) -> str:
    """What a kubelet on containerd writes for a tag the registry does not have."""
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": failed to '
        f'resolve reference "{image}": {image}: not found'
    )


def backoff_message(image: str) -> str:
    """The ImagePullBackOff message (kubelet >= 1.30 appends the last pull error)."""
    return f'Back-off pulling image "{image}": ErrImagePull: {err_image_pull_message(image)}'


@dataclass
class PullFailure:
    """Pull attempts of one pod that cannot start, and when the next one is due."""

    started: dt.datetime
    next_attempt: dt.datetime
    attempts: int = 0
    reported: dict[str, Any] = field(default_factory=dict)
    reported_error: bool = False
    """The ErrImagePull of the latest attempt was reported: report back-off from now on."""

    def step(self, now: dt.datetime, base_backoff_s: float) -> None:
        """Called once per pass: a new attempt when the back-off is over."""
        if now >= self.next_attempt:
            delay = min(base_backoff_s * 2 ** min(self.attempts, 10), MAX_BACKOFF_S)
            self.attempts += 1
            self.next_attempt = now + dt.timedelta(seconds=delay)
            self.reported_error = False

    def reason(self) -> str:
        return "ImagePullBackOff" if self.reported_error else "ErrImagePull"


def missing_images(pod: Any, pullable: Pullable) -> list[str]:
    """The pod's image references (init containers included) that cannot be pulled."""
    containers = [*(pod.spec.init_containers or []), *pod.spec.containers]
    return [c.image for c in containers if not pullable(c.image)]


def pending_status(
    pod: Any, failure: PullFailure, pullable: Pullable, pod_ip: str, host_ip: str
) -> dict[str, Any]:
    """The status a kubelet reports for a pod waiting on images it cannot pull (no timestamps)."""
    reason = failure.reason()
    containers = []
    for c in pod.spec.containers:
        if pullable(c.image):
            waiting = {"reason": "ContainerCreating"}
        elif reason == "ErrImagePull":
            waiting = {"reason": reason, "message": err_image_pull_message(c.image)}
        else:
            waiting = {"reason": reason, "message": backoff_message(c.image)}
        containers.append(
            {
                "name": c.name,
                "image": c.image,
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": waiting},
            }
        )
    not_ready = {"status": "False", "reason": "ContainersNotReady"}
    unready = ", ".join(f"[{c.name}]" for c in pod.spec.containers)
    not_ready["message"] = f"containers with unready status: {unready}"
    return {
        "phase": "Pending",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": failure.started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True"},
            {"type": "Initialized", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", **not_ready},
            {"type": "Ready", **not_ready},
        ],
        "containerStatuses": containers,
    }
