"""librdkafka's mock cluster: a second Kafka implementation, with injectable broker faults.

No Apache Kafka runs here (no JVM distribution, no Docker), but Debian's ``librdkafka1``
(Apache Kafka's C client) contains the in-process Kafka implementation its own test suite
uses: real TCP listeners on 127.0.0.1 speaking the Kafka protocol, N brokers, partition
leaders and replicas, consumer groups, the idempotent producer and transactions, and a
fault-injection API. This module runs one in a **child process** (ctypes on
``librdkafka.so.1``: a crash in C cannot take the caller down) and drives it over a pipe:

    with MockCluster(brokers=3) as cluster:
        cluster.create_topics({"ocms-reports": 4})
        print(cluster.bootstrap_servers)          # 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
        cluster.partition_set_leader("ocms-reports", 0, 2)
        cluster.push_request_errors("Produce", ["NOT_LEADER_OR_FOLLOWER", "REQUEST_TIMED_OUT"])
        cluster.broker_push_request_errors(1, "Produce", [("NO_ERROR", 3000)])   # stored, answered late
        cluster.broker_down(1); cluster.broker_up(1)
        cluster.set_rtt(2, 500)

What the mock cannot do, and what callers must do instead (docs: docs/operating.md;
the client side is the ``mock`` broker profile, ``infra.kafka.MOCK``): no CreateTopics from
clients (it advertises no controller: topics are created here, through the mock API, before
the worker and the collector start; Faust's topic declaration is off), fetches that find no
data are held for their whole max wait (the profile's 100 ms), no log compaction (compacted
changelogs grow; keep tests short), each partition keeps its last 5 MiB or 100,000 batches
(older ones are dropped), and producer sequences are checked for transactional producers
only, so a batch the idempotent producer re-sends after a lost answer is stored twice.

The child exits when its stdin closes, so the cluster never outlives the process that
started it (SIGKILL included).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import threading

from cms_core.errors import OCMSError
from infra.broker import EmbeddedBroker
from infra.kafka import MOCK

#: Kafka protocol API keys the fault-injection calls take by name.
API_KEYS = {"Produce": 0, "Fetch": 1, "ListOffsets": 2, "Metadata": 3, "OffsetCommit": 8, "OffsetFetch": 9,
            "FindCoordinator": 10, "JoinGroup": 11, "Heartbeat": 12, "LeaveGroup": 13, "SyncGroup": 14,
            "DescribeGroups": 15, "ListGroups": 16, "ApiVersions": 18, "CreateTopics": 19, "InitProducerId": 22,
            "AddPartitionsToTxn": 24, "AddOffsetsToTxn": 25, "EndTxn": 26, "TxnOffsetCommit": 28}

#: Kafka protocol error codes by name (rd_kafka_resp_err_t values for broker errors).
ERRORS = {"NO_ERROR": 0, "CORRUPT_MESSAGE": 2, "UNKNOWN_TOPIC_OR_PARTITION": 3, "LEADER_NOT_AVAILABLE": 5,
          "NOT_LEADER_OR_FOLLOWER": 6, "REQUEST_TIMED_OUT": 7, "MESSAGE_TOO_LARGE": 10, "NETWORK_EXCEPTION": 13,
          "COORDINATOR_LOAD_IN_PROGRESS": 14, "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16,
          "NOT_ENOUGH_REPLICAS": 19, "NOT_ENOUGH_REPLICAS_AFTER_APPEND": 20, "INVALID_REQUIRED_ACKS": 21,
          "REBALANCE_IN_PROGRESS": 27, "TOPIC_AUTHORIZATION_FAILED": 29, "UNKNOWN_SERVER_ERROR": -1,
          "KAFKA_STORAGE_ERROR": 56, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45, "DUPLICATE_SEQUENCE_NUMBER": 46}


class MockClusterError(OCMSError, RuntimeError):
    """The mock cluster could not be started or refused a command (the message says which)."""


def library_path() -> str:
    """librdkafka's shared object (Debian package ``librdkafka1``)."""
    found = ctypes.util.find_library("rdkafka")
    if found is None:
        raise MockClusterError("librdkafka.so.1 not found: install Debian's librdkafka1 (`make test` does)")
    return found


# ---------------------------------------------------------------------------------------- child process
class _Cluster:
    """The ctypes side (runs in the child)."""

    def __init__(self, brokers: int):
        lib = ctypes.CDLL(library_path())
        vp, cp, i32 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32
        signatures = {
            "rd_kafka_conf_new": ([], vp),
            "rd_kafka_conf_set": ([vp, cp, cp, cp, ctypes.c_size_t], ctypes.c_int),
            "rd_kafka_new": ([ctypes.c_int, vp, cp, ctypes.c_size_t], vp),
            "rd_kafka_handle_mock_cluster": ([vp], vp),
            "rd_kafka_mock_cluster_bootstraps": ([vp], cp),
            "rd_kafka_mock_topic_create": ([vp, cp, ctypes.c_int, ctypes.c_int], ctypes.c_int),
            "rd_kafka_mock_broker_set_down": ([vp, i32], ctypes.c_int),
            "rd_kafka_mock_broker_set_up": ([vp, i32], ctypes.c_int),
            "rd_kafka_mock_broker_set_rtt": ([vp, i32, ctypes.c_int], ctypes.c_int),
            "rd_kafka_mock_partition_set_leader": ([vp, cp, i32, i32], ctypes.c_int),
            "rd_kafka_mock_partition_set_follower": ([vp, cp, i32, i32], ctypes.c_int),
            "rd_kafka_mock_coordinator_set": ([vp, cp, cp, i32], ctypes.c_int),
            "rd_kafka_mock_push_request_errors_array": ([vp, ctypes.c_int16, ctypes.c_size_t,
                                                         ctypes.POINTER(ctypes.c_int)], None),
            "rd_kafka_mock_topic_set_error": ([vp, cp, ctypes.c_int], None),
            "rd_kafka_version_str": ([], cp),
        }
        for name, (args, result) in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = args, result
        # Variadic (err, rtt_ms) pairs: called with ctypes values, no argtypes.
        lib.rd_kafka_mock_broker_push_request_error_rtts.restype = ctypes.c_int
        self.lib = lib
        conf = lib.rd_kafka_conf_new()
        error = ctypes.create_string_buffer(512)
        for key, value in (("test.mock.num.brokers", str(brokers)), ("log_level", "3")):
            if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), error, len(error)) != 0:
                raise MockClusterError(f"{key}={value}: {error.value.decode()}")
        # A producer handle owns the mock cluster; it is never used to produce.
        self.handle = lib.rd_kafka_new(0, conf, error, len(error))
        if not self.handle:
            raise MockClusterError(f"rd_kafka_new: {error.value.decode()}")
        self.cluster = lib.rd_kafka_handle_mock_cluster(self.handle)
        self.bootstrap_servers = lib.rd_kafka_mock_cluster_bootstraps(self.cluster).decode()
        self.version = lib.rd_kafka_version_str().decode()

    def run(self, op: str, args: dict):
        lib, cluster = self.lib, self.cluster

        def checked(code: int, what: str):
            if code != 0:
                raise MockClusterError(f"{what}: librdkafka error {code}")

        if op == "create_topic":
            checked(lib.rd_kafka_mock_topic_create(cluster, args["topic"].encode(), int(args["partitions"]),
                                                   int(args.get("replication", 3))), f"create topic {args['topic']}")
        elif op == "broker_down":
            checked(lib.rd_kafka_mock_broker_set_down(cluster, int(args["broker"])), "broker down")
        elif op == "broker_up":
            checked(lib.rd_kafka_mock_broker_set_up(cluster, int(args["broker"])), "broker up")
        elif op == "set_rtt":
            checked(lib.rd_kafka_mock_broker_set_rtt(cluster, int(args["broker"]), int(args["rtt_ms"])), "set rtt")
        elif op == "partition_set_leader":
            checked(lib.rd_kafka_mock_partition_set_leader(cluster, args["topic"].encode(), int(args["partition"]),
                                                           int(args["broker"])), "partition leader")
        elif op == "partition_set_follower":
            checked(lib.rd_kafka_mock_partition_set_follower(cluster, args["topic"].encode(), int(args["partition"]),
                                                             int(args["broker"])), "partition follower")
        elif op == "coordinator_set":
            checked(lib.rd_kafka_mock_coordinator_set(cluster, args["key_type"].encode(), args["key"].encode(),
                                                      int(args["broker"])), "coordinator")
        elif op == "push_request_errors":
            codes = [int(code) for code in args["errors"]]
            array = (ctypes.c_int * len(codes))(*codes)
            lib.rd_kafka_mock_push_request_errors_array(cluster, int(args["api_key"]), len(codes), array)
        elif op == "broker_push_request_errors":
            pairs = [ctypes.c_int(int(value)) for error, rtt in args["errors"] for value in (error, rtt)]
            checked(lib.rd_kafka_mock_broker_push_request_error_rtts(
                ctypes.c_void_p(cluster), ctypes.c_int32(int(args["broker"])), ctypes.c_int16(int(args["api_key"])),
                ctypes.c_size_t(len(args["errors"])), *pairs), "broker request errors")
        elif op == "topic_set_error":
            lib.rd_kafka_mock_topic_set_error(cluster, args["topic"].encode(), int(args["error"]))
        else:
            raise MockClusterError(f"unknown mock operation {op!r}")


def serve(brokers: int) -> int:
    """Child process: start the cluster, print its address, then run one JSON command per stdin line."""
    try:
        cluster = _Cluster(brokers)
    except MockClusterError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 1
    print(json.dumps({"bootstrap_servers": cluster.bootstrap_servers, "version": cluster.version}), flush=True)
    for line in sys.stdin:
        try:
            command = json.loads(line)
            cluster.run(command["op"], command.get("args", {}))
            print(json.dumps({"ok": True}), flush=True)
        except (MockClusterError, KeyError, ValueError, TypeError) as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
    return 0  # stdin closed: the parent is gone or done


# ---------------------------------------------------------------------------------------- parent side
class MockCluster:
    """A librdkafka mock cluster in a child process (the same face as infra.broker.EmbeddedBroker)."""

    #: What the clients do differently on it (infra.kafka.MOCK: topics are created here, not by clients).
    profile = MOCK

    def __init__(self, brokers: int = 3):
        if isinstance(brokers, bool) or not isinstance(brokers, int) or not 1 <= brokers <= 16:
            raise MockClusterError(f"brokers={brokers!r}: must be an integer in [1, 16]")
        self.brokers = brokers
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._bootstrap: str | None = None
        self.version: str | None = None
        self.topics: dict[str, int] = {}  # created here: name -> partitions

    @property
    def pid(self) -> int | None:
        """The cluster's child process (its CPU is the brokers')."""
        return self._process.pid if self._process is not None else None

    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            raise MockClusterError("the mock cluster is not running")
        return self._bootstrap

    def start(self) -> "MockCluster":
        library_path()  # a clear error before spawning
        self._process = subprocess.Popen(
            [sys.executable, "-m", "infra.mock_cluster", str(self.brokers)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        hello = self._read()
        if "error" in hello:
            self.stop()
            raise MockClusterError(f"mock cluster did not start: {hello['error']}")
        self._bootstrap, self.version = hello["bootstrap_servers"], hello["version"]
        return self

    def _read(self) -> dict:
        line = self._process.stdout.readline()
        if not line:
            code = self._process.poll()
            raise MockClusterError(f"mock cluster process ended (exit {code})")
        return json.loads(line)

    def _call(self, op: str, **args) -> None:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                raise MockClusterError("the mock cluster is not running")
            self._process.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
            self._process.stdin.flush()
            answer = self._read()
        if "error" in answer:
            raise MockClusterError(f"{op} {args}: {answer['error']}")

    # ------------------------------------------------------------------ topics and faults
    def create_topics(self, partitions: dict[str, int], replication: int | None = None) -> None:
        """Create topics through the mock API (clients' CreateTopics is not supported by the mock);
        one created before with the same partitions is left as it is (as EmbeddedBroker.create_topics)."""
        for topic, count in partitions.items():
            if topic in self.topics:
                if self.topics[topic] != count:
                    raise MockClusterError(f"topic {topic!r} has {self.topics[topic]} partitions, asked for {count}")
                continue
            self._call("create_topic", topic=topic, partitions=count,
                       replication=min(self.brokers, 3) if replication is None else replication)
            self.topics[topic] = count

    def broker_down(self, broker: int) -> None:
        """Close the broker's connections and refuse new ones (its partitions' leaders do not move)."""
        self._call("broker_down", broker=broker)

    def broker_up(self, broker: int) -> None:
        self._call("broker_up", broker=broker)

    def set_rtt(self, broker: int, rtt_ms: int) -> None:
        """Delay every answer of ``broker`` by ``rtt_ms`` milliseconds."""
        self._call("set_rtt", broker=broker, rtt_ms=rtt_ms)

    def partition_set_leader(self, topic: str, partition: int, broker: int) -> None:
        """Move a partition's leader (clients see NOT_LEADER_OR_FOLLOWER and refresh their metadata)."""
        self._call("partition_set_leader", topic=topic, partition=partition, broker=broker)

    def partition_set_follower(self, topic: str, partition: int, broker: int) -> None:
        """Make consumers fetch ``topic``/``partition`` from ``broker`` (a follower)."""
        self._call("partition_set_follower", topic=topic, partition=partition, broker=broker)

    def coordinator_set(self, key_type: str, key: str, broker: int) -> None:
        """Make ``broker`` the coordinator of a group (``key_type="group"``) or a transactional id."""
        self._call("coordinator_set", key_type=key_type, key=key, broker=broker)

    def push_request_errors(self, api: str | int, errors: list[str | int]) -> None:
        """The next ``len(errors)`` requests of ``api`` (to any broker) fail with these errors, in order."""
        api_key = API_KEYS[api] if isinstance(api, str) else int(api)
        self._call("push_request_errors", api_key=api_key,
                   errors=[ERRORS[e] if isinstance(e, str) else int(e) for e in errors])

    def broker_push_request_errors(self, broker: int, api: str | int,
                                   errors: list[tuple[str | int, int]]) -> None:
        """The next ``len(errors)`` requests of ``api`` to ``broker`` get these (error, round-trip ms):
        ``("NO_ERROR", 3000)`` handles the request (a produce is stored) and answers 3 s late, so a
        client that times out first re-sends it: a lost answer."""
        api_key = API_KEYS[api] if isinstance(api, str) else int(api)
        self._call("broker_push_request_errors", broker=broker, api_key=api_key,
                   errors=[(ERRORS[e] if isinstance(e, str) else int(e), int(rtt)) for e, rtt in errors])

    def topic_set_error(self, topic: str, error: str | int) -> None:
        """Metadata answers for ``topic`` carry ``error`` until set back to NO_ERROR."""
        self._call("topic_set_error", topic=topic, error=ERRORS[error] if isinstance(error, str) else int(error))

    # ------------------------------------------------------------------ lifecycle
    def stop(self, timeout: float = 5.0) -> None:
        process, self._process, self._bootstrap = self._process, None, None
        if process is None:
            return
        try:
            process.stdin.close()  # the child's loop ends on EOF
        except OSError:
            pass
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def __enter__(self) -> "MockCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


#: The brokers the tests and benchmarks start on this machine: the embedded Tansu broker and the mock.
BROKER_KINDS = ("embedded", "mock")


def start_broker(kind: str, brokers: int = 3):
    """An unstarted broker of ``kind`` (a context manager that starts and stops it): ``embedded``, the
    Tansu broker (infra.broker); ``mock``, this cluster with ``brokers`` brokers."""
    if kind == "mock":
        return MockCluster(brokers)
    if kind == "embedded":
        return EmbeddedBroker()
    raise MockClusterError(f"unknown broker kind {kind!r}: expected one of {', '.join(BROKER_KINDS)}")


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
