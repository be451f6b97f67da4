"""The Kafka echo floor of scripts/bench-e2e (c): a trivial consumer that copies every SendRequest
record of IN_TOPIC to OUT_TOPIC as a FeedbackEvent with a RequestCompleted of the same request id,
keyed by the request id, as the dispatcher does. It is what the dispatcher's latency would be if
sending took no time: one consume, one decode, one produce.

Usage: python3 echo_floor.py BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP GENERATED_PYTHON_DIR
Runs in its own process (its own interpreter lock) and its own consumer group; the consumer starts at
the current end of IN_TOPIC and polls one record at a time; the producer is acks=all, idempotent,
linger 5 ms (the dispatcher's). Prints `ready` once it is positioned; stops
on SIGTERM or when stdin closes.
"""
import os
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, in_topic, out_topic, group, generated = sys.argv[1:6]
sys.path.insert(0, generated)
from push.v1 import feedback_pb2, send_request_pb2  # noqa: E402

# The broker holds a fetch up to fetch.wait.max.ms (librdkafka default 500 ms) when it has no new
# records; the floor asks for the reader's 10 ms (BENCH_ECHO_FETCH_WAIT_MS) so that it measures Kafka,
# not a consumer setting the dispatcher is free to choose.
fetch_wait_ms = os.environ.get("BENCH_ECHO_FETCH_WAIT_MS", "10")
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "fetch.wait.max.ms": fetch_wait_ms})
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
partitions = consumer.list_topics(in_topic, timeout=10).topics[in_topic].partitions
consumer.assign([TopicPartition(in_topic, p, consumer.get_watermark_offsets(TopicPartition(in_topic, p), timeout=10)[1])
                 for p in partitions])
print("ready", flush=True)
failures = 0


def delivered(err, msg):
    global failures
    if err is not None:
        failures += 1


def echo(msg) -> None:
    request = send_request_pb2.SendRequest()
    request.ParseFromString(msg.value())
    now_ms = int(time.time() * 1000)
    completed = feedback_pb2.RequestCompleted(request_id=request.request_id, total=1, delivered=1,
                                              requested_at_ms=request.created_at_ms, completed_at_ms=now_ms)
    event = feedback_pb2.FeedbackEvent(event_id=f"echo-{request.request_id}", event_time_ms=now_ms,
                                       request_completed=completed)
    while True:
        try:
            producer.produce(out_topic, key=request.request_id.encode(), value=event.SerializeToString(),
                             headers=[("content-type", b"application/x-protobuf; message=push.v1.FeedbackEvent")],
                             on_delivery=delivered)
            return
        except BufferError:
            producer.poll(0.01)


while not stop.is_set():
    msg = consumer.poll(0.05)  # returns as soon as one record is there
    if msg is not None and not msg.error():
        echo(msg)
    producer.poll(0)
producer.flush(10)
consumer.close()
sys.exit(1 if failures else 0)
