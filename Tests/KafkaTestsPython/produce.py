"""Produces COUNT records to TOPIC with confluent-kafka: key "key-<i % 4>", value "py-<i>", headers
[("origin", "python"), ("seq", "<i>")]; waits for every delivery report and prints one JSON object per
record (value, partition, offset). Exits 1 when a delivery failed."""
import json
import sys

from confluent_kafka import Producer

bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
failed = []


def report(err, msg):
    if err is not None:
        failed.append(str(err))
    else:
        print(json.dumps({"value": msg.value().decode(), "partition": msg.partition(), "offset": msg.offset()}), flush=True)


for i in range(count):
    producer.produce(topic, key=f"key-{i % 4}", value=f"py-{i}", headers=[("origin", "python"), ("seq", str(i))], on_delivery=report)
    producer.poll(0)
remaining = producer.flush(30)
if failed or remaining:
    print(f"failed={failed} remaining={remaining}", file=sys.stderr)
    sys.exit(1)
