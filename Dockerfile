# One image with every executable of the project: registration-service, dispatcher, apns-simulator,
# and kafka-dev-broker. Built on Debian 12 (bookworm), the platform the project is tested on.
FROM swift:6.3-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      pkg-config librdkafka-dev libnghttp2-dev libssl-dev libpq-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Protos ./Protos
RUN swift build -c release --static-swift-stdlib \
 && mkdir /out \
 && cp .build/release/registration-service .build/release/dispatcher \
       .build/release/apns-simulator .build/release/kafka-dev-broker /out/

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      librdkafka1 libnghttp2-14 libssl3 libpq5 libmicrohttpd12 ca-certificates openssl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
COPY scripts/gen-dev-credentials /usr/local/bin/gen-dev-credentials
USER nobody
