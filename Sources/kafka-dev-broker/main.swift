// Development Kafka broker: librdkafka's mock cluster with the project's topics.
// Usage and control protocol: see `KafkaDevBroker` in Sources/KafkaDevBroker.
import Foundation
import KafkaDevBroker

exit(await KafkaDevBroker.run(arguments: Array(CommandLine.arguments.dropFirst())))
