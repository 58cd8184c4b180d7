"""The `kappaflow` command line: `describe` a topology, `run` it on Kafka, `reset` an application.

Applications are named `module:attr`, where attr is a Topology or a zero-argument function returning
one, so the same string works for `kappaflow describe`, `kappaflow run` and the operator's StreamApp.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import StreamsError
from kappaflow.cli_status import DEFAULT_SUMMARY_INTERVAL_S, Snapshot, banner_lines, snapshot, summary_line
from kappaflow.cli_tools import add_commands as add_toolbox_commands
from kappaflow.topology.topology import Topology

if TYPE_CHECKING:
    from kappaflow.runner.stop_request import StopRequest

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # kappaflow.runner.logs.LEVELS (not imported here: slow)
# Beyond --close-timeout (which bounds the commit and close), the seconds left to stop the HTTP servers
# and log the last line before the process exits regardless.
CLOSE_GRACE_S = 10.0


def load_topology(target: str) -> Topology:
    """Import `module:attr` and return its Topology (calling attr if it is a function)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise StreamsError(f"application must be 'module:attr', got '{target}'")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StreamsError(f"cannot import module '{module_name}': {exc}") from exc
    try:
        found: Any = getattr(module, attr)
    except AttributeError as exc:
        raise StreamsError(f"module '{module_name}' has no attribute '{attr}'") from exc
    if callable(found) and not isinstance(found, Topology):
        _check_no_arguments(found, target)
        found = found()  # an error raised inside it is the user's, shown with its own traceback
    if hasattr(found, "build") and not isinstance(found, Topology):
        found = found.build()
    if not isinstance(found, Topology):
        raise StreamsError(f"'{target}' is not a Topology (got {type(found).__name__})")
    return found


def _check_no_arguments(function: Any, target: str) -> None:
    """Fail with a one-line error when `function` cannot be called without arguments. Only the signature
    decides: a TypeError raised inside a well-formed function is a bug there, not a wrong signature, and
    must keep its traceback."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (some builtins): calling it will tell
        return
    try:
        signature.bind()
    except TypeError as exc:
        raise StreamsError(
            f"'{target}' must be a Topology or a function taking no arguments: "
            f"{getattr(function, '__name__', target)}{signature}: {exc}"
        ) from exc


def _describe(args: argparse.Namespace) -> int:
    topology = load_topology(args.app)
    description = topology.describe()
    if args.format == "json":
        print(description.to_json())
    elif args.format == "mermaid":
        print(description.to_mermaid())
    else:
        print(description)
    return 0


def _config(args: argparse.Namespace) -> Any:
    from kappaflow.api.config import StreamsConfig

    return StreamsConfig.load(file=args.config)


def stop_on_signals(stop: StopRequest) -> list[int]:
    """Make SIGTERM and SIGINT set `stop`; the list returned collects the signals that arrived.

    The handler only notes the signal: Python runs it between two bytecodes of the main thread, which
    may be inside a write to stderr, where the logs go. A log line written from the handler then fails
    ("reentrant call" inside the buffered writer), logging's report of that failure writes to stderr and
    fails too, and the exception leaves the handler before it set `stop`: the process ignored the
    signal and ran on (a chaos test's instance did not stop on SIGTERM). The caller logs the signal once
    its wait returns. `stop` is a StopRequest, not a threading.Event, for the same reason: setting an
    Event takes a lock the main thread may hold at that bytecode (runner/stop_request.py)."""
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return received


def _run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT, then commit and close (exit 0), or exit 1 if the app failed."""
    from kappaflow.api.config import StreamsConfig
    from kappaflow.runner import KafkaStreams, State, tune_gc_for_streaming
    from kappaflow.runner.logs import LogSettingError, configure_logging
    from kappaflow.runner.retry import StoppedWhileWaitingError
    from kappaflow.runner.stop_request import StopRequest

    try:  # text on a terminal, JSON lines otherwise (a pod's log), unless asked
        configure_logging(args.log_level, args.log_format, default_format="auto")
    except LogSettingError as exc:
        raise StreamsError(str(exc)) from exc
    log = logging.getLogger("kappaflow.cli")
    # A client library that aborts the process (a librdkafka assertion, issue 29) leaves no Python
    # traceback: faulthandler prints every thread's stack to stderr on SIGABRT/SIGSEGV, which names the
    # client call each thread was in (worker processes inherit it). Best effort: CPython writes it from the
    # signal handler while the other threads run on, so a thread running Python meanwhile (returning from
    # a deep call, importing, ending) can make it read freed memory and die of SIGSEGV part-way, after its
    # "Fatal Python error: Aborted" line (tests/runtime/test_cli_crash_trace.py says when it cannot).
    faulthandler.enable(all_threads=True)
    topology = load_topology(args.app)
    config = _config(args)
    if args.close_membership:  # start() refuses REMAIN_IN_GROUP for a dynamic member, before joining
        membership = {"close.group.membership.operation": args.close_membership}
        config = StreamsConfig({**config.as_dict(), **membership})
    streams = KafkaStreams(topology, config)
    stop = StopRequest()
    received = stop_on_signals(stop)
    summary_every = _summary_interval(args.summary_interval)
    queries = _start_query_server(streams)  # before start(): a bad setting fails before joining the group
    tune_gc_for_streaming()  # this process is the application's: its collector is set for stream work
    streams.start()
    for line in _banner(streams, queries):
        log.info("%s", line)
    last = _snapshot(streams)
    while not stop.wait(0.2):
        if streams.state is State.ERROR:
            break
        if summary_every > 0 and time.monotonic() - last.at >= summary_every:
            current = _snapshot(streams)
            log.info("%s", summary_line(last, current))
            last = current
    if received:
        log.info("received %s: committing and closing", signal.Signals(received[0]).name)
    failed = streams.state is State.ERROR
    _exit_if_stuck(args.close_timeout + CLOSE_GRACE_S, log)
    if queries is not None:
        queries.stop()
    closed = streams.close(args.close_timeout)  # as close.group.membership.operation says
    if not closed:
        log.error(
            "close timed out after %.0fs; where each thread was:\n%s", args.close_timeout, _thread_stacks()
        )
    failed = failed or streams.error is not None  # the stream thread may have failed while closing
    unclean = streams.final_commit_error
    if failed and isinstance(streams.error, StoppedWhileWaitingError):
        log.error("%s", streams.error)  # "stopped while waiting for the broker at ..."
    elif failed and streams.error is not None:
        log.error("stopped (error): %s", streams.error)
    elif failed or not closed:
        log.info("stopped (%s)", "error" if failed else "close timed out")
    elif unclean is not None:
        log.error("stopped (not clean: the final commit failed: %s); records processed since the last "
                  "commit will be processed again", unclean)  # fmt: skip
    else:
        log.info("stopped (clean)")
    code = 1 if failed or not closed or unclean is not None else 0
    # Everything was committed and closed above (or the close timed out): leave now. librdkafka handles
    # left to the interpreter's finalizer could otherwise hold the exit (e.g. on an unreachable broker).
    _flush_logs()
    os._exit(code)


def version() -> str:
    try:
        return importlib.metadata.version("kappaflow")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        import kappaflow

        return str(kappaflow.__version__)


def _summary_interval(flag: float | None) -> float:
    """`--summary-interval`, else KAPPAFLOW_SUMMARY_INTERVAL, else the default; 0 turns it off."""
    if flag is not None:
        if flag < 0:
            raise StreamsError(f"--summary-interval: expected seconds (0 turns it off), got {flag}")
        return flag
    raw = os.environ.get("KAPPAFLOW_SUMMARY_INTERVAL")
    if raw is None or raw.strip() == "":
        return DEFAULT_SUMMARY_INTERVAL_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise StreamsError(f"KAPPAFLOW_SUMMARY_INTERVAL: expected seconds (0 turns it off), got {raw!r}")
    return seconds


def _banner(streams: Any, queries: Any) -> list[str]:
    """The start-up banner of `streams`: its URLs are the ones really bound (a port 0 is resolved)."""
    config = streams.config
    metrics_url = None
    if streams.metrics_port is not None:
        host = config.get_str("metrics.host") or "0.0.0.0"
        metrics_url = f"http://{'localhost' if host == '0.0.0.0' else host}:{streams.metrics_port}"
    query_url = f"http://{streams.host_info}" if queries is not None else None
    return banner_lines(version(), config.as_dict(), metrics_url, query_url)


def _snapshot(streams: Any) -> Snapshot:
    metrics = streams.metrics
    return snapshot(time.monotonic(), streams.state.value, metrics.counters(), metrics.gauges())


def _exit_if_stuck(seconds: float, log: logging.Logger) -> None:
    """Shutdown is bounded always: if it has not ended after `seconds`, say so and exit (status 1)."""

    def give_up() -> None:
        log.error("shutdown did not end within %.0fs: exiting without a clean close; where each thread "
                  "was:\n%s", seconds, _thread_stacks())  # fmt: skip
        _flush_logs()
        os._exit(1)

    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()


def _thread_stacks() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in sys._current_frames().items()
    )


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()


def _start_query_server(streams: Any) -> Any:
    """With `query.http.enabled=true`, serve interactive queries on the `application.server` port
    (bound to `query.http.host`, default 0.0.0.0, so a pod answers on its StatefulSet DNS name)."""
    if not streams.config.get_bool("query.http.enabled"):
        return None
    from kappaflow.query import QueryServer

    if streams.host_info is None:
        raise StreamsError("query.http.enabled=true needs application.server=host:port")
    host = streams.config.get_str("query.http.host") or "0.0.0.0"
    try:
        server = QueryServer(streams, host)
    except OSError as exc:  # the port is taken, or the host is not this machine's
        raise StreamsError(
            f"config 'application.server': cannot listen on {host}:{streams.host_info.port} for "
            f"interactive queries (query.http.enabled=true): {exc.strerror or exc}"
        ) from exc
    server.start()
    return server


def _reset(args: argparse.Namespace) -> int:
    """What kafka-streams-application-reset does: input offsets to earliest, internal topics, local state."""
    from kappaflow.clients.admin import InternalTopicManager
    from kappaflow.clients.kafka import client_configs

    config = _config(args)
    topology = load_topology(args.app)
    app_id = config.application_id
    inputs = sorted(
        set(topology.source_topics()) - {g.source.topics[0] for g in topology.global_stores.values()}
    )
    internal = topology.internal_topic_names(app_id)
    state_dir = Path(config.get_str("state.dir")) / app_id
    admin = InternalTopicManager(client_configs(config, f"{app_id}-reset")["admin"])
    elsewhere = (
        f"the local state of instances on other machines (their own {state_dir}) cannot be reached "
        "from here: start them with an empty state directory; otherwise their stores are detected as "
        "belonging to the deleted changelogs and wiped (a WARNING names each) when they start"
    )
    if args.dry_run:
        try:
            state, members = admin.group_members(app_id)
        except Exception as exc:  # a dry run still says what it would do
            print(f"WARNING: could not check group '{app_id}' for active members: {exc}")
        else:
            if members:
                names = ", ".join(m.instance_id or m.client_id or m.member_id for m in members)
                print(
                    f"WARNING: group '{app_id}' still has {len(members)} active member(s) ({state}: "
                    f"{names}): stop every instance first, or the reset will refuse to run"
                )
        print(f"would reset offsets of group '{app_id}' on {', '.join(inputs)} to earliest")
        print(f"would delete internal topics: {', '.join(sorted(internal)) or '-'}")
        print(f"would delete local state: {state_dir}")
        print(f"note: {elsewhere}")
        return 0
    admin.reset_to_earliest(app_id, inputs)
    print(f"reset offsets of group '{app_id}' on {', '.join(inputs)} to earliest")
    deleted = admin.delete_topics(sorted(internal))
    print(f"deleted internal topics: {', '.join(deleted) or '-'}")
    shutil.rmtree(state_dir, ignore_errors=True)
    print(f"deleted local state: {state_dir}")
    print(f"not deleted: {elsewhere}")
    return 0


def _spark_master(choice: str) -> str | None:
    """`auto`: the master spark-submit chose when launched by it (it sets PYSPARK_GATEWAY_PORT), else
    local[2]. None tells kappaflow.spark to keep the submitted one."""
    import os

    if choice == "submit" or (choice == "auto" and "PYSPARK_GATEWAY_PORT" in os.environ):
        return None
    return "local[2]" if choice == "auto" else choice


def _reprocess(args: argparse.Namespace) -> int:
    """Run the topology on Spark over the retained log into a new application id (kappaflow.spark)."""
    import functools

    from kappaflow.api.config import StreamsConfig
    from kappaflow.spark import reprocess
    from kappaflow.spark.progress import live_output_warning

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topology = load_topology(args.app)  # fail fast, before Spark starts, if it cannot be imported
    config = StreamsConfig.load({"application.id": args.application_id}, file=args.config)
    config = config.with_overrides({"application.id": args.application_id})
    output_map = dict(item.split("=", 1) for item in args.output_map)
    warning = live_output_warning(topology.sink_topics(), output_map, args.skip_outputs)
    if warning is not None:
        print(f"WARNING: {warning}", file=sys.stderr, flush=True)
    result = reprocess(
        functools.partial(load_topology, args.app),
        config,
        master=_spark_master(args.master),
        start=args.start,
        end=args.end,
        state_dir=args.state_dir,
        write_state=False if args.no_state else True if args.state_dir else None,
        output_map=output_map,
        skip_outputs=args.skip_outputs,
        reader=args.reader,
        splits=args.splits,
        progress=lambda text: print(f"==> {text}", flush=True),
        progress_interval_s=args.progress_interval,
    )
    if args.json:
        print(json.dumps(dataclasses.asdict(result), default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kappaflow", description="Kafka Streams for Python")
    parser.add_argument("--version", action="version", version=f"kappaflow {version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    describe = commands.add_parser("describe", help="print a topology's sub-topologies, nodes and stores")
    describe.add_argument("app", help="module:attr naming a Topology or a function returning one")
    group = describe.add_mutually_exclusive_group()
    group.add_argument("--json", dest="format", action="store_const", const="json", help="JSON for tools")
    group.add_argument(
        "--mermaid", dest="format", action="store_const", const="mermaid", help="Mermaid graph"
    )
    describe.set_defaults(func=_describe, format="text")
    run = commands.add_parser("run", help="run the application against Kafka until SIGTERM")
    run.add_argument("app", help="module:attr naming a Topology or a function returning one")
    run.add_argument("--config", help="a .properties file; KAPPAFLOW_* environment variables override it")
    run.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        help="default: KAPPAFLOW_LOG_LEVEL, else INFO",
    )
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="default: KAPPAFLOW_LOG_FORMAT, else text on a terminal and JSON lines otherwise",
    )
    run.add_argument("--close-timeout", type=float, default=60.0, help="seconds to commit and close")
    run.add_argument(
        "--close-membership",
        type=str.upper,
        choices=("DEFAULT", "LEAVE_GROUP", "REMAIN_IN_GROUP"),
        help="what closing on SIGTERM does to the group membership (KIP-1153): LEAVE_GROUP removes a "
        "static member at once, so its partitions move without waiting out session.timeout.ms "
        "(default: the config close.group.membership.operation, else DEFAULT: dynamic members leave, "
        "static members remain)",
    )
    run.add_argument(
        "--summary-interval",
        type=float,
        metavar="SECONDS",
        help="log a summary line (state, records in/out, rate, lag) this often; 0: never (default: "
        f"KAPPAFLOW_SUMMARY_INTERVAL, else {DEFAULT_SUMMARY_INTERVAL_S:.0f})",
    )
    run.set_defaults(func=_run)
    reset = commands.add_parser(
        "reset", help="reset input offsets to earliest, delete internal topics and local state"
    )
    reset.add_argument("app", help="module:attr naming a Topology or a function returning one")
    reset.add_argument("--config", help="a .properties file; KAPPAFLOW_* environment variables override it")
    reset.add_argument("--dry-run", action="store_true", help="print what would be done")
    reset.set_defaults(func=_reset)
    add_toolbox_commands(commands)
    reprocess = commands.add_parser(
        "reprocess",
        help="rebuild outputs and state on Spark from the retained log, into a new application id",
    )
    reprocess.add_argument("app", help="module:attr naming a Topology or a function returning one")
    reprocess.add_argument("--application-id", required=True, help="the new application id to bootstrap")
    reprocess.add_argument("--from", dest="start", default="earliest", help='earliest or {"topic": {"0": 5}}')
    reprocess.add_argument("--to", dest="end", default="latest", help='latest or {"topic": {"0": 9}}')
    reprocess.add_argument(
        "--master",
        default="auto",
        help="Spark master (default: spark-submit's when launched by it, else local[2]); 'submit' keeps it",
    )
    reprocess.add_argument(
        "--config", help="a .properties file; KAPPAFLOW_* environment variables override it"
    )
    reprocess.add_argument(
        "--state-dir",
        help="write per-task RocksDB state here (default: state.dir, when Spark runs locally; on a cluster "
        "the executors' disks are not the pods', so only the changelogs carry state)",
    )
    reprocess.add_argument("--no-state", action="store_true", help="write changelogs only, no local state")
    reprocess.add_argument(
        "--reader",
        choices=["kafka-client", "spark"],
        default="kafka-client",
        help="read input with librdkafka inside the Spark tasks (default, faster), or with Spark's Kafka "
        "source",
    )
    reprocess.add_argument(
        "--splits",
        type=int,
        default=None,
        help="Spark tasks per partition where a stage may split: offset ranges of a stateless stage before "
        "the first shuffle, key slots of a keyed count/reduce/aggregate after one (default: one range or "
        "two key slots per Spark task slot; 1: never split)",
    )
    reprocess.add_argument("--skip-outputs", action="store_true", help="rebuild state only, write no outputs")
    reprocess.add_argument(
        "--output-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="write output topic OLD to NEW (default: the live output topics themselves)",
    )
    reprocess.add_argument("--json", action="store_true", help="print the result as JSON at the end")
    reprocess.add_argument(
        "--progress-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="report a running stage's Spark tasks this often (0: only when each stage ends)",
    )
    reprocess.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default="WARNING")
    reprocess.set_defaults(func=_reprocess)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `produce TOPIC --parse-key a:1 b:2`: values after options are values too
        if args.command != "produce" or any(item.startswith("--") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.values = [*args.values, *extra]
    try:
        return int(args.func(args))
    except StreamsError as exc:
        print(f"kappaflow: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
