"""Reads COUNT records of TOPIC with confluent-kafka (its own bundled librdkafka) and prints one JSON
object per record: key, value, headers (in order), partition, offset. Exits 1 on timeout."""
import json
import sys
import time

from confluent_kafka import Consumer

bootstrap, topic, count, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
consumer = Consumer({
    "bootstrap.servers": bootstrap,
    "group.id": group,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
})
consumer.subscribe([topic])
seen = 0
deadline = time.time() + 40
while seen < count and time.time() < deadline:
    msg = consumer.poll(0.5)
    if msg is None:
        continue
    if msg.error():
        print(json.dumps({"error": str(msg.error())}), file=sys.stderr)
        continue
    headers = [[name, None if value is None else value.decode()] for name, value in (msg.headers() or [])]
    print(json.dumps({
        "key": None if msg.key() is None else msg.key().decode(),
        "value": msg.value().decode(),
        "headers": headers,
        "partition": msg.partition(),
        "offset": msg.offset(),
    }), flush=True)
    seen += 1
consumer.close()
sys.exit(0 if seen >= count else 1)
