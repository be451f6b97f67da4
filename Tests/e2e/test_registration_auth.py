"""Issue 13 end to end: the registration API authenticated and scoped (API keys and user-bound JWTs,
over gRPC with grpcio and over JSON with curl), the installation rule, health and reflection, batch
register, token rotation, forget-a-user and the rate limit, on the stack scripts/up started.

The tests add their own keys to the stack's key file and reload it with SIGHUP (the development key
stays), then put the file back."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import time
import uuid

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import pushstack as stack

wait_for = stack.wait_for
BUNDLE = "com.example.auth"
OTHER_BUNDLE = "com.example.other"
AUDIENCE = "push.v1.TokenRegistry"


def new_key(key_id: str) -> str:
    return f"pk_{key_id}_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def entry(key: str, bundles: list[str], operations: list[str], **extra) -> dict:
    key_id = key.split("_")[1]
    return {"id": key_id, "sha256": hashlib.sha256(key.encode()).hexdigest(), "bundle_ids": bundles,
            "operations": operations, **extra}


class Keys:
    """The test keys, written into the stack's key file beside the development key."""

    def __init__(self):
        suffix = uuid.uuid4().hex[:8]
        self.scoped = new_key(f"scoped-{suffix}")          # BUNDLE: register, unregister
        self.other_bundle = new_key(f"other-{suffix}")     # OTHER_BUNDLE: register, unregister
        self.admin = new_key(f"admin-{suffix}")            # BUNDLE: admin only
        self.limited = new_key(f"limited-{suffix}")        # every bundle: register, burst 2, one more per 5 s
        self.ec_private = ec.generate_private_key(ec.SECP256R1())
        self.ec_kid, self.hs_kid = f"es-{suffix}", f"hs-{suffix}"
        self.hs_secret = os.urandom(32)
        self.path = stack.stack_env()["PUSH_AUTH_KEYS_FILE"]
        with open(self.path) as f:
            self.original = f.read()
        self.base = json.loads(self.original)

    def document(self, extra_api_keys: list[dict] = ()) -> dict:
        pem = self.ec_private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        return {
            "api_keys": self.base["api_keys"] + [
                entry(self.scoped, [BUNDLE], ["register", "unregister"]),
                entry(self.other_bundle, [OTHER_BUNDLE], ["register", "unregister"]),
                entry(self.admin, [BUNDLE], ["admin"]),
                entry(self.limited, ["*"], ["register"], rate_per_second=0.2, burst=2),
                *extra_api_keys],
            "registration_jwt_keys": [
                {"kid": self.ec_kid, "bundle_id": BUNDLE, "alg": "ES256", "public_key_pem": pem},
                {"kid": self.hs_kid, "bundle_id": BUNDLE, "alg": "HS256",
                 "secret": base64.urlsafe_b64encode(self.hs_secret).decode().rstrip("=")},
            ],
        }

    def write(self, document: dict | str, probe: str) -> None:
        """Writes the key file, sends SIGHUP, and waits until `probe` (an API key) is accepted or refused
        as the new file says."""
        text = document if isinstance(document, str) else json.dumps(document)
        with open(self.path, "w") as f:
            f.write(text)
        pid = int((stack.VAR_DIR / "run" / "registration-service.pid").read_text().strip())
        os.kill(pid, signal.SIGHUP)
        expected_valid = probe in text or hashlib.sha256(probe.encode()).hexdigest() in text
        wait_for(lambda: (code_of(lambda: register(probe, random_device(BUNDLE))) != grpc.StatusCode.UNAUTHENTICATED)
                 == expected_valid, what="the key file reload", timeout=20)

    def restore(self) -> None:
        self.write(self.original, stack.api_key())


def random_device(bundle: str = BUNDLE, user: str = "", installation: str = ""):
    common = stack.pb("common_pb2")
    return common.Device(device_token=stack.random_token(), bundle_id=bundle, environment=common.Environment.Value("SANDBOX"),
                         user_id=user, installation_id=installation)


def stub(credential: str):
    channel = stack.grpc_channel(credential)
    return channel, stack.pb("token_registry_pb2_grpc").TokenRegistryStub(channel)


def register(credential: str, device, previous_token: str = ""):
    registry = stack.pb("token_registry_pb2")
    channel, s = stub(credential)
    with channel:
        return s.RegisterToken(registry.RegisterTokenRequest(device=device, previous_token=previous_token), timeout=15)


def code_of(call) -> grpc.StatusCode:
    try:
        call()
        return grpc.StatusCode.OK
    except grpc.RpcError as error:
        return error.code()


def curl_json(method: str, body: dict, credential: str | None) -> tuple[int, dict, dict]:
    """POSTs proto3 JSON to the registration service with curl over h2c; returns status, headers, body."""
    address = stack.stack_env()["PUSH_GRPC_ADDRESS"]
    command = ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-H", "content-type: application/json",
               "--data-binary", json.dumps(body), f"http://{address}/push.v1.TokenRegistry/{method}"]
    if credential is not None:
        command[1:1] = ["-H", f"authorization: Bearer {credential}"]
    out = subprocess.run(command, check=True, capture_output=True, timeout=30).stdout.decode()  # keep the CRLFs
    head, _, payload = out.partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    return status, headers, json.loads(payload) if payload.strip() else {}


@pytest.fixture(scope="module")
def keys():
    keys = Keys()
    keys.write(keys.document(), keys.scoped)
    yield keys
    keys.restore()


def user_jwt(keys: Keys, user: str, *, kid: str | None = None, algorithm: str = "ES256", bundle: str = BUNDLE,
             lifetime: int = 600, issued: int | None = None) -> str:
    now = int(time.time()) if issued is None else issued
    claims = {"sub": user, "bundle_id": bundle, "aud": AUDIENCE, "iat": now, "exp": now + lifetime}
    if algorithm == "ES256":
        return jwt.encode(claims, keys.ec_private, algorithm="ES256", headers={"kid": kid or keys.ec_kid})
    return jwt.encode(claims, keys.hs_secret, algorithm="HS256", headers={"kid": kid or keys.hs_kid})


def test_every_method_refuses_missing_wrong_and_out_of_scope_keys(keys):
    registry = stack.pb("token_registry_pb2")
    device = random_device(BUNDLE, user="scope-user")
    wrong = "_".join(keys.scoped.split("_")[:2]) + "_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    calls = {
        "RegisterToken": lambda s: s.RegisterToken(registry.RegisterTokenRequest(device=device), timeout=15),
        "UnregisterToken": lambda s: s.UnregisterToken(
            registry.UnregisterTokenRequest(device_token=device.device_token, bundle_id=BUNDLE, reason="test"), timeout=15),
        "BatchRegisterTokens": lambda s: s.BatchRegisterTokens(
            registry.BatchRegisterTokensRequest(registrations=[registry.RegisterTokenRequest(device=device)]), timeout=15),
        "ForgetUser": lambda s: s.ForgetUser(registry.ForgetUserRequest(bundle_id=BUNDLE, user_id="scope-user"), timeout=15),
    }
    # Which key may call which method on BUNDLE.
    allowed = {"RegisterToken": keys.scoped, "UnregisterToken": keys.scoped, "BatchRegisterTokens": keys.scoped,
               "ForgetUser": keys.admin}
    for method, call in calls.items():
        for credential, expected in [("", grpc.StatusCode.UNAUTHENTICATED), (wrong, grpc.StatusCode.UNAUTHENTICATED),
                                     ("pk_nobody_" + "A" * 43, grpc.StatusCode.UNAUTHENTICATED)]:
            channel, s = stub(credential)
            with channel:
                assert code_of(lambda: call(s)) == expected, (method, "missing/wrong key")
        # A valid key for another bundle id: refused for this bundle id.
        channel, s = stub(keys.other_bundle if method != "ForgetUser" else keys.scoped)
        with channel:
            result = code_of(lambda: call(s))
        if method == "BatchRegisterTokens":
            assert result == grpc.StatusCode.OK  # the batch answers; the item carries the refusal (below)
        else:
            assert result == grpc.StatusCode.PERMISSION_DENIED, (method, "other bundle / operation")
        channel, s = stub(keys.admin if method != "ForgetUser" else keys.scoped)
        with channel:
            assert code_of(lambda: call(s)) == (grpc.StatusCode.OK if method == "BatchRegisterTokens" else grpc.StatusCode.PERMISSION_DENIED), \
                (method, "operation not granted")
        channel, s = stub(allowed[method])
        with channel:
            assert code_of(lambda: call(s)) == grpc.StatusCode.OK, (method, "valid key")
    channel, s = stub(keys.other_bundle)
    with channel:
        reply = calls["BatchRegisterTokens"](s)
    assert [r.code for r in reply.results] == [grpc.StatusCode.PERMISSION_DENIED.value[0]]

    # The same over JSON with curl: 401, 403, 200.
    body = {"device": {"deviceToken": stack.random_token(), "bundleId": BUNDLE, "environment": "SANDBOX"}}
    status, _, reply = curl_json("RegisterToken", body, None)
    assert (status, reply["code"]) == (401, "UNAUTHENTICATED")
    status, _, reply = curl_json("RegisterToken", body, wrong)
    assert (status, reply["code"]) == (401, "UNAUTHENTICATED")
    status, _, reply = curl_json("RegisterToken", body, keys.other_bundle)
    assert (status, reply["code"]) == (403, "PERMISSION_DENIED")
    status, _, reply = curl_json("ForgetUser", {"bundleId": BUNDLE, "userId": "u"}, keys.scoped)
    assert (status, reply["code"]) == (403, "PERMISSION_DENIED")
    status, _, reply = curl_json("RegisterToken", body, keys.scoped)
    assert status == 200 and reply["deviceToken"] == body["device"]["deviceToken"]
    status, _, reply = curl_json("UnregisterToken", {"deviceToken": body["device"]["deviceToken"], "bundleId": BUNDLE}, keys.scoped)
    assert status == 200
    status, _, reply = curl_json("BatchRegisterTokens", {"registrations": [body]}, keys.scoped)
    assert status == 200 and reply["results"][0]["registered"]["deviceToken"]
    status, _, reply = curl_json("ForgetUser", {"bundleId": BUNDLE, "userId": "nobody"}, keys.admin)
    assert status == 200 and reply["eventId"]


def every_method(credential: str) -> dict[str, grpc.StatusCode]:
    """The status of one call of each TokenRegistry method on BUNDLE with `credential`."""
    registry = stack.pb("token_registry_pb2")
    device = random_device(BUNDLE, user="rotation-user")
    channel, s = stub(credential)
    with channel:
        return {
            "RegisterToken": code_of(lambda: s.RegisterToken(registry.RegisterTokenRequest(device=device), timeout=15)),
            "UnregisterToken": code_of(lambda: s.UnregisterToken(
                registry.UnregisterTokenRequest(device_token=device.device_token, bundle_id=BUNDLE), timeout=15)),
            "BatchRegisterTokens": code_of(lambda: s.BatchRegisterTokens(
                registry.BatchRegisterTokensRequest(registrations=[registry.RegisterTokenRequest(device=device)]), timeout=15)),
            "ForgetUser": code_of(lambda: s.ForgetUser(registry.ForgetUserRequest(bundle_id=BUNDLE, user_id="rotation-user"), timeout=15)),
        }


def test_a_rotated_key_replaces_the_old_one(keys):
    operations = ["register", "unregister", "admin"]
    old, new = new_key(f"rot-old-{uuid.uuid4().hex[:6]}"), new_key(f"rot-new-{uuid.uuid4().hex[:6]}")
    ok = {m: grpc.StatusCode.OK for m in ["RegisterToken", "UnregisterToken", "BatchRegisterTokens", "ForgetUser"]}
    refused = {m: grpc.StatusCode.UNAUTHENTICATED for m in ok}
    keys.write(keys.document([entry(old, [BUNDLE], operations)]), old)
    assert every_method(old) == ok and every_method(new) == refused
    # Both at once while callers move over.
    keys.write(keys.document([entry(old, [BUNDLE], operations), entry(new, [BUNDLE], operations)]), new)
    assert every_method(old) == ok and every_method(new) == ok
    keys.write(keys.document([entry(new, [BUNDLE], operations)]), old)
    assert every_method(old) == refused and every_method(new) == ok
    keys.write(keys.document(), keys.scoped)


def test_user_bound_registration_tokens(keys):
    user = f"jwt-user-{uuid.uuid4()}"
    device = random_device(BUNDLE, user=user)
    assert register(user_jwt(keys, user), device).device_token == device.device_token
    assert register(user_jwt(keys, user, algorithm="HS256"), random_device(BUNDLE, user=user)).event_id
    wait_for(lambda: stack.psql(f"SELECT user_id, status FROM device_tokens WHERE device_token = '{device.device_token}'")
             == [[user, "active"]], what="the JWT-registered row")
    # Another user's id, another bundle id, and unregistering: refused.
    assert code_of(lambda: register(user_jwt(keys, user), random_device(BUNDLE, user="someone-else"))) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: register(user_jwt(keys, user), random_device(BUNDLE, user=""))) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(lambda: register(user_jwt(keys, user), random_device(OTHER_BUNDLE, user=user))) == grpc.StatusCode.PERMISSION_DENIED
    # Expired (past the 60 s leeway), unknown kid, alg none, HS256 presented for the EC key.
    expired = user_jwt(keys, user, issued=int(time.time()) - 1000, lifetime=600)
    assert code_of(lambda: register(expired, random_device(BUNDLE, user=user))) == grpc.StatusCode.UNAUTHENTICATED
    unknown = user_jwt(keys, user, kid="no-such-kid")
    assert code_of(lambda: register(unknown, random_device(BUNDLE, user=user))) == grpc.StatusCode.UNAUTHENTICATED
    claims = {"sub": user, "bundle_id": BUNDLE, "aud": AUDIENCE, "iat": int(time.time()), "exp": int(time.time()) + 60}
    none = jwt.encode(claims, None, algorithm="none", headers={"kid": keys.ec_kid})
    assert code_of(lambda: register(none, random_device(BUNDLE, user=user))) == grpc.StatusCode.UNAUTHENTICATED
    pem = keys.ec_private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "HS256", "kid": keys.ec_kid}).encode()).rstrip(b"=")
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=")
    import hmac
    signature = base64.urlsafe_b64encode(hmac.new(pem, header + b"." + payload, hashlib.sha256).digest()).rstrip(b"=")
    confused = (header + b"." + payload + b"." + signature).decode()
    assert code_of(lambda: register(confused, random_device(BUNDLE, user=user))) == grpc.StatusCode.UNAUTHENTICATED
    too_long = user_jwt(keys, user, lifetime=7200)
    assert code_of(lambda: register(too_long, random_device(BUNDLE, user=user))) == grpc.StatusCode.UNAUTHENTICATED


def test_reusing_an_installation_id_does_not_knock_out_another_users_token(keys):
    installation = f"inst-{uuid.uuid4()}"
    victim = random_device(BUNDLE, user="alice", installation=installation)
    register(keys.scoped, victim)
    wait_for(lambda: stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{victim.device_token}'") == [["active"]],
             what="alice's token")
    intruder = random_device(BUNDLE, user="mallory", installation=installation)
    register(keys.scoped, intruder)
    wait_for(lambda: stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{intruder.device_token}'") == [["active"]],
             what="mallory's token")
    assert stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{victim.device_token}'") == [["active"]]
    # Alice's own new token of the installation replaces hers.
    fresh = random_device(BUNDLE, user="alice", installation=installation)
    register(keys.scoped, fresh)
    wait_for(lambda: stack.psql(f"SELECT status, inactive_reason FROM device_tokens WHERE device_token = '{victim.device_token}'")
             == [["inactive", "replaced"]], what="alice's old token replaced by her new one")
    assert stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{intruder.device_token}'") == [["active"]]


def test_batch_register_answers_each_item(keys):
    registry = stack.pb("token_registry_pb2")
    good = random_device(BUNDLE, user="batch-user")
    bad = random_device(BUNDLE)
    bad.device_token = "not-hex"
    foreign = random_device(OTHER_BUNDLE)
    channel, s = stub(keys.scoped)
    with channel:
        reply = s.BatchRegisterTokens(registry.BatchRegisterTokensRequest(registrations=[
            registry.RegisterTokenRequest(device=good), registry.RegisterTokenRequest(device=bad),
            registry.RegisterTokenRequest(device=foreign)]), timeout=15)
        assert [r.code for r in reply.results] == [0, grpc.StatusCode.INVALID_ARGUMENT.value[0], grpc.StatusCode.PERMISSION_DENIED.value[0]]
        assert reply.results[0].registered.device_token == good.device_token
        assert reply.results[1].message.startswith("registrations[1].device.device_token:")
        assert code_of(lambda: s.BatchRegisterTokens(registry.BatchRegisterTokensRequest(), timeout=15)) == grpc.StatusCode.INVALID_ARGUMENT
    wait_for(lambda: stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{good.device_token}'") == [["active"]],
             what="the batch's good item")
    assert stack.psql(f"SELECT count(*) FROM device_tokens WHERE device_token = '{foreign.device_token}'") == [["0"]]


def test_a_rotated_token_replaces_the_previous_one(keys):
    user = f"rotating-{uuid.uuid4()}"
    old = random_device(BUNDLE, user=user)
    register(keys.scoped, old)
    wait_for(lambda: stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{old.device_token}'") == [["active"]],
             what="the old token")
    new = random_device(BUNDLE, user=user)
    register(keys.scoped, new, previous_token=old.device_token.upper())
    wait_for(lambda: stack.psql(f"SELECT status, inactive_reason FROM device_tokens WHERE device_token = '{old.device_token}'")
             == [["inactive", "replaced"]], what="the previous token replaced")
    assert stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{new.device_token}'") == [["active"]]
    assert code_of(lambda: register(keys.scoped, random_device(BUNDLE), previous_token="xyz")) == grpc.StatusCode.INVALID_ARGUMENT


def test_forget_a_user_deactivates_and_announces_every_token(keys):
    registry, feedback = stack.pb("token_registry_pb2"), stack.pb("feedback_pb2")
    user = f"forget-{uuid.uuid4()}"
    devices = [random_device(BUNDLE, user=user), random_device(BUNDLE, user=user)]
    bystander = random_device(BUNDLE, user=f"other-{uuid.uuid4()}")
    for device in devices + [bystander]:
        register(keys.scoped, device)
    tokens = sorted(d.device_token for d in devices)
    wait_for(lambda: len(stack.psql(f"SELECT 1 FROM device_tokens WHERE user_id = '{user}' AND status = 'active'")) == 2,
             what="the user's tokens")
    reader = stack.TopicReader(stack.FEEDBACK)
    try:
        channel, s = stub(keys.admin)
        with channel:
            reply = s.ForgetUser(registry.ForgetUserRequest(bundle_id=BUNDLE, user_id=user), timeout=15)
        assert reply.event_id

        def announced(records):
            return {e.token_invalidated.device_token for e in stack.decode_feedback(records)
                    if e.WhichOneof("event") == "token_invalidated"
                    and e.token_invalidated.outcome_reason == feedback.OutcomeReason.Value("OUTCOME_REASON_USER_FORGOTTEN")
                    } >= set(tokens)
        reader.read_until(announced, timeout=60)
    finally:
        reader.close()
    assert stack.psql(f"SELECT device_token, status, inactive_reason FROM device_tokens WHERE user_id = '{user}' ORDER BY 1") == \
        [[t, "inactive", "forgotten"] for t in tokens]
    assert stack.psql(f"SELECT status FROM device_tokens WHERE device_token = '{bystander.device_token}'") == [["active"]]


def test_the_rate_limit_answers_resource_exhausted_with_a_retry_hint(keys):
    # The bucket holds 2 and refills one every 5 s: 6 calls meet an empty bucket even on a slow machine.
    codes, hint = [], None
    channel, s = stub(keys.limited)
    registry = stack.pb("token_registry_pb2")
    with channel:
        for _ in range(6):
            try:
                s.RegisterToken(registry.RegisterTokenRequest(device=random_device(BUNDLE)), timeout=15)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())
                hint = hint or dict(error.trailing_metadata() or ()).get("retry-after-ms")
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes and codes[0] == grpc.StatusCode.OK
    assert hint is not None and 0 < int(hint) <= 5000
    statuses = [curl_json("RegisterToken", {"device": {"deviceToken": stack.random_token(), "bundleId": BUNDLE,
                                                       "environment": "SANDBOX"}}, keys.limited) for _ in range(4)]
    limited = [(h, b) for status, h, b in statuses if status == 429]
    assert limited and limited[0][1]["code"] == "RESOURCE_EXHAUSTED" and int(limited[0][0]["retry-after"]) >= 1
    # The bucket refills: the key works again within the hinted time.
    wait_for(lambda: code_of(lambda: register(keys.limited, random_device(BUNDLE))) == grpc.StatusCode.OK,
             what="the bucket refilled", timeout=15, interval=1.0)


def test_health_check_and_watch_follow_kafka():
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    with grpc.insecure_channel(stack.stack_env()["PUSH_GRPC_ADDRESS"]) as channel:  # no credentials: probes carry none
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == serving
        assert health.Check(health_pb2.HealthCheckRequest(service="push.v1.TokenRegistry"), timeout=10).status == serving
        assert code_of(lambda: health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)) == grpc.StatusCode.NOT_FOUND
        watch = health.Watch(health_pb2.HealthCheckRequest(service="push.v1.TokenRegistry"), timeout=120)
        assert next(watch).status == serving
        brokers = range(1, len(stack.stack_env()["PUSH_KAFKA_BOOTSTRAP"].split(",")) + 1)
        try:
            assert stack.kafka_control(*[f"down {b}" for b in brokers]) == ["ok"] * len(brokers)
            assert next(watch).status == not_serving
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == not_serving
        finally:
            assert stack.kafka_control(*[f"up {b}" for b in brokers]) == ["ok"] * len(brokers)
        assert next(watch).status == serving
        watch.cancel()
        wait_for(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == serving, what="SERVING again")


def test_reflection_lists_the_registry_through_v1alpha_and_v1():
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from grpc_reflection.v1alpha import reflection_pb2
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    with grpc.insecure_channel(stack.stack_env()["PUSH_GRPC_ADDRESS"]) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = list(database.get_services())
        assert "push.v1.TokenRegistry" in services and "grpc.health.v1.Health" in services
        registry_file = database.FindFileContainingSymbol("push.v1.TokenRegistry")
        assert registry_file.name == "push/v1/token_registry.proto"
        assert [m.name for m in registry_file.service[0].method] == ["RegisterToken", "UnregisterToken", "BatchRegisterTokens", "ForgetUser"]
        assert database.FindFileContainingSymbol("push.v1.Device").name == "push/v1/common.proto"
        # A hand-built grpc.reflection.v1 call: v1 and v1alpha are the same on the wire.
        call = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        replies = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services=""),
                                  reflection_pb2.ServerReflectionRequest(file_by_filename="push/v1/token_registry.proto"),
                                  reflection_pb2.ServerReflectionRequest(file_containing_symbol="no.such.Symbol")]), timeout=10))
        assert "push.v1.TokenRegistry" in [s.name for s in replies[0].list_services_response.service]
        files = [FileDescriptorProto.FromString(b) for b in replies[1].file_descriptor_response.file_descriptor_proto]
        assert [f.name for f in files] == ["push/v1/common.proto", "push/v1/token_registry.proto"]
        assert replies[2].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


def test_credentials_are_never_logged(keys):
    # Runs after the tests above (file order): every key and JWT they used went through the service.
    log = (stack.VAR_DIR / "log" / "registration-service.log").read_text()
    for secret in [stack.api_key(), keys.scoped, keys.other_bundle, keys.admin, keys.limited]:
        assert secret.split("_", 2)[2] not in log
    assert "eyJ" not in log  # the base64url of '{"' that starts every JWT part
    assert "authentication on" in log or "authentication keys reloaded" in log


def test_hostile_calls_are_refused_in_the_documented_order(keys):
    """Issue 23 on the running stack: a malformed body from an unauthenticated caller gets
    UNAUTHENTICATED (not a parse error), a batch with a JWT is refused, ForgetUser refuses the user
    ids RegisterToken refuses, and a batch counts its items against the key's rate."""
    registry = stack.pb("token_registry_pb2")
    garbage = b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
    for method in ["RegisterToken", "UnregisterToken", "BatchRegisterTokens", "ForgetUser"]:
        for credential, expected in [("", grpc.StatusCode.UNAUTHENTICATED), (stack.api_key(), grpc.StatusCode.INVALID_ARGUMENT)]:
            channel, _ = stub(credential)
            with channel:
                raw = channel.unary_unary(f"/push.v1.TokenRegistry/{method}", request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
                assert code_of(lambda: raw(garbage, timeout=15)) == expected, (method, bool(credential))
        address = stack.stack_env()["PUSH_GRPC_ADDRESS"]
        status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge",
                                 "-H", "content-type: application/json", "--data-binary", '{"device": [',
                                 f"http://{address}/push.v1.TokenRegistry/{method}"], capture_output=True, timeout=30).stdout
        assert status == b"401", (method, status)

    user = f"hostile-{uuid.uuid4()}"
    channel, s = stub(user_jwt(keys, user))
    with channel:
        batch = registry.BatchRegisterTokensRequest(registrations=[registry.RegisterTokenRequest(device=random_device(BUNDLE, user=user))])
        assert code_of(lambda: s.BatchRegisterTokens(batch, timeout=15)) == grpc.StatusCode.PERMISSION_DENIED

    channel, s = stub(keys.admin)
    with channel:
        for bad in ["alice\x00evil", "tab\there", "a" * 256]:
            assert code_of(lambda: s.ForgetUser(registry.ForgetUserRequest(bundle_id=BUNDLE, user_id=bad), timeout=15)) \
                == grpc.StatusCode.INVALID_ARGUMENT, repr(bad)

    # keys.limited holds at most 2 items: a batch of 5 registers at most 2, the rest answer RESOURCE_EXHAUSTED (8).
    channel, s = stub(keys.limited)
    with channel:
        batch = registry.BatchRegisterTokensRequest(registrations=[registry.RegisterTokenRequest(device=random_device(BUNDLE))
                                                                   for _ in range(5)])
        replies = []
        wait_for(lambda: code_of(lambda: replies.append(s.BatchRegisterTokens(batch, timeout=15))) == grpc.StatusCode.OK,
                 what="a batch admitted by the limited key", timeout=30, interval=1.0)
        codes = [result.code for result in replies[-1].results]
        assert 1 <= codes.count(0) <= 2 and codes.count(0) + codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]) == 5, codes
        assert codes == sorted(codes), "the first items go ahead"
