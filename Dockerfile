# One image with every executable of the project: registration-service, dispatcher, apns-simulator,
# kafka-dev-broker and pushctl. Built on Debian 12 (bookworm), the platform the project is tested on.
# The build context needs only Package.swift, Sources/ and Protos/: the manifest declares the test
# targets only when Tests/ exists (Tests/e2e/test_image_context.py builds from exactly these COPY lines).
FROM swift:6.3-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      pkg-config librdkafka-dev libnghttp2-dev libssl-dev libpq-dev libmicrohttpd-dev libjemalloc-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Protos ./Protos
RUN swift build -c release --static-swift-stdlib \
 && mkdir /out \
 && cp .build/release/registration-service .build/release/dispatcher \
       .build/release/apns-simulator .build/release/kafka-dev-broker .build/release/pushctl /out/

FROM debian:bookworm-slim
# curl: the compose health checks (GET /healthz on PUSH_ADMIN_PORT); openssl: gen-dev-credentials.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      librdkafka1 libnghttp2-14 libssl3 libpq5 libmicrohttpd12 libjemalloc2 ca-certificates openssl curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 push \
 && useradd --system --uid 10001 --gid push --no-create-home --shell /usr/sbin/nologin push
COPY --from=build /out/ /usr/local/bin/
COPY scripts/gen-dev-credentials /usr/local/bin/gen-dev-credentials
# Keys and passwords mounted into the container are mode 0640 with group `push`: readable through
# the group, not by others.
USER push
