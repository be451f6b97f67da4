"""grpcio client for the GRPC module's tests.

Usage: echo_client.py STUBS_DIR TARGET [CA_FILE]
Runs every scenario against the Echo service at TARGET (host:port) and prints one JSON object with
each scenario's outcome. With CA_FILE the channel uses TLS verified against it.
"""
import json
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import echo_pb2  # noqa: E402
import echo_pb2_grpc  # noqa: E402


def status(call):
    try:
        call()
        return {"code": "OK"}
    except grpc.RpcError as error:
        return {"code": error.code().name, "details": error.details()}


def main():
    target = sys.argv[2]
    options = [("grpc.max_receive_message_length", 16 << 20), ("grpc.max_send_message_length", 16 << 20)]
    if len(sys.argv) > 3:
        with open(sys.argv[3], "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    stub = echo_pb2_grpc.EchoStub(channel)
    results = {}

    reply = stub.Echo(echo_pb2.EchoRequest(message="héllo wörld", payload=b"\x00\x01\xff"), timeout=10)
    results["ok"] = {"message": reply.message, "payload": reply.payload.hex()}

    results["error"] = status(lambda: stub.Fail(
        echo_pb2.FailRequest(code=9, message="precondition failed: 100% wrong, naïve\nsecond line"), timeout=10))
    results["permission"] = status(lambda: stub.Fail(echo_pb2.FailRequest(code=7, message="no"), timeout=10))
    results["unimplemented"] = status(lambda: stub.Missing(echo_pb2.EchoRequest(message="x"), timeout=10))

    started = time.monotonic()
    results["deadline"] = status(lambda: stub.Sleep(echo_pb2.SleepRequest(milliseconds=5000), timeout=0.3))
    results["deadline"]["seconds"] = time.monotonic() - started

    payload = os.urandom(3 * 1024 * 1024)
    big = stub.Echo(echo_pb2.EchoRequest(message="big", payload=payload), timeout=20)
    results["large"] = {"equal": big.payload == payload, "size": len(big.payload)}
    results["too_large"] = status(lambda: stub.Echo(echo_pb2.EchoRequest(payload=os.urandom(5 * 1024 * 1024)), timeout=20))

    futures = [stub.Echo.future(echo_pb2.EchoRequest(message="call %d" % i), timeout=20) for i in range(300)]
    results["concurrent"] = {"ok": sum(1 for i, f in enumerate(futures) if f.result().message == "call %d" % i)}

    print(json.dumps(results))


if __name__ == "__main__":
    main()
