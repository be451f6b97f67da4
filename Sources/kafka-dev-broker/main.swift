// Development Kafka broker: librdkafka's mock cluster with the project's topics.
// Usage and control protocol: see `KafkaDevBroker` in Sources/Kafka/DevBroker.
import Foundation
import Kafka

exit(await KafkaDevBroker.run(arguments: Array(CommandLine.arguments.dropFirst())))
