print("kafka-dev-broker: not yet")
