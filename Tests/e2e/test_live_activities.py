"""Live Activity broadcast channels on the real stack (docs/live-activities.md): a channel created,
stored, listed and served by the admin port; one broadcast accepted by the simulator once and counted
by its subscribers; a deleted channel refused; the channel limit enforced locally; and a broadcast never
sent twice, even when the dispatcher is killed after Apple accepted it and its record is read again.

Each test uses a bundle id of its own, so channels of other tests do not count against its limit.
"""
from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pushstack as stack

wait_for = stack.wait_for

ENVIRONMENT = "SANDBOX"
COMMAND_TYPE = "application/x-protobuf; message=push.v1.ChannelCommand"


def bundle(prefix: str) -> str:
    return f"com.example.live.{prefix}{uuid.uuid4().hex[:8]}"


def channel_command(action: str, bundle_id: str, name: str, policy: str = "MOST_RECENT_MESSAGE_STORED"):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    command = send.ChannelCommand(
        action=send.ChannelCommand.Action.Value(action), bundle_id=bundle_id,
        environment=common.Environment.Value(ENVIRONMENT), name=name,
        message_storage_policy=common.MessageStoragePolicy.Value(policy), requested_at_ms=int(time.time() * 1000))
    key = f"{bundle_id}/{ENVIRONMENT.lower()}/{name}"
    stack.produce(stack.SEND_REQUESTS, key.encode(), command.SerializeToString(), COMMAND_TYPE)


def broadcast_request(request_id: str, bundle_id: str, channel_id: str):
    send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
    payload = {"aps": {"timestamp": int(time.time()), "event": "update", "content-state": {"score": "1-0"}}}
    return send.SendRequest(
        request_id=request_id, channel_id=channel_id,
        notification=send.Notification(bundle_id=bundle_id, environment=common.Environment.Value(ENVIRONMENT),
                                        push_type=common.PushType.Value("PUSH_TYPE_LIVEACTIVITY"), priority=10,
                                        payload=json.dumps(payload)))


class Feedback:
    """The channel events and broadcast reports on the feedback topic, read live."""

    def __init__(self):
        self.reader = stack.TopicReader(stack.FEEDBACK)
        self.events: list = []

    def poll(self) -> None:
        self.events += stack.decode_feedback(self.reader.drain(0.2))

    def channel_events(self, name: str) -> list:
        return [e for e in self.events if e.WhichOneof("event") == "channel_event" and e.channel_event.name == name]

    def broadcast_reports(self, request_id: str) -> list:
        return [e for e in self.events
                if e.WhichOneof("event") == "broadcast_report" and e.broadcast_report.request_id == request_id]

    def completions(self, request_id: str) -> list:
        return [e for e in self.events
                if e.WhichOneof("event") == "request_completed" and e.request_completed.request_id == request_id]

    def until(self, predicate, what: str, timeout: float = 60.0):
        return wait_for(lambda: (self.poll(), predicate())[1], what=what, timeout=timeout, interval=0)

    def close(self) -> None:
        self.reader.close()


def simulator_channel(channel_id: str) -> dict | None:
    for channel in stack.simulator_admin("/admin/channels")["channels"]:
        if channel["channel_id"] == channel_id:
            return channel
    return None


def create(feedback: Feedback, bundle_id: str, name: str):
    channel_command("CREATE", bundle_id, name)
    feedback_pb = stack.pb("feedback_pb2")
    events = feedback.until(lambda: feedback.channel_events(name), f"the ChannelEvent of {name}")
    return events[0].channel_event, feedback_pb


def test_a_channel_is_created_broadcast_to_once_and_deleted():
    feedback = Feedback()
    bundle_id, name = bundle("life"), f"match-{uuid.uuid4().hex[:6]}"
    try:
        event, feedback_pb = create(feedback, bundle_id, name)
        assert event.kind == feedback_pb.ChannelEvent.Kind.Value("CREATED"), event
        assert event.channel_id, event
        # Stored, and served by the dispatcher's admin port.
        assert stack.psql(f"SELECT channel_id, state FROM channels WHERE bundle_id = '{bundle_id}' AND name = '{name}'") \
            == [[event.channel_id, "active"]]
        status, body, _ = stack.admin("dispatcher", f"/v1/channels/{bundle_id}/{name}")
        assert status == 200, body
        shown = json.loads(body)["channels"]
        assert [(c["channel_id"], c["state"], c["environment"]) for c in shown] == [(event.channel_id, "active", "sandbox")], shown
        status, body, _ = stack.admin("dispatcher", f"/v1/channels/{bundle_id}")
        assert status == 200 and event.channel_id in body, body
        # The same command again: the same channel, the same event id, one channel at Apple.
        channel_command("CREATE", bundle_id, name)
        feedback.until(lambda: len(feedback.channel_events(name)) >= 2, "the repeated ChannelEvent")
        assert {e.event_id for e in feedback.channel_events(name)} == {feedback.channel_events(name)[0].event_id}
        assert len([c for c in stack.simulator_admin("/admin/channels")["channels"] if c["bundle_id"] == bundle_id]) == 1

        # One broadcast reaches the channel's subscribers: one request to Apple, one report.
        stack.simulator_admin("/admin/channels/subscribers", "PUT", {"channel_id": event.channel_id, "subscribers": 37})
        request_id = f"broadcast-{uuid.uuid4()}"
        stack.send_request(broadcast_request(request_id, bundle_id, event.channel_id))
        reports = feedback.until(lambda: feedback.broadcast_reports(request_id), "the BroadcastReport")
        report = reports[0].broadcast_report
        assert report.outcome == feedback_pb.DeliveryOutcome.Value("DELIVERED"), report
        assert report.http_status == 200 and report.apns_unique_id, report
        assert report.channel_name == name
        feedback.until(lambda: feedback.completions(request_id), "the RequestCompleted")
        channel = simulator_channel(event.channel_id)
        assert channel["broadcasts"] == 1 and channel["subscribers"] == 37, channel

        # Deleted: the next broadcast is refused with the channel's reason and reaches no one.
        channel_command("DELETE", bundle_id, name)
        feedback.until(lambda: any(e.channel_event.kind == feedback_pb.ChannelEvent.Kind.Value("DELETED")
                                   for e in feedback.channel_events(name)), "the DELETED ChannelEvent")
        assert simulator_channel(event.channel_id) is None
        again = f"broadcast-{uuid.uuid4()}"
        stack.send_request(broadcast_request(again, bundle_id, event.channel_id))
        refused = feedback.until(lambda: feedback.broadcast_reports(again), "the refused BroadcastReport")[0].broadcast_report
        assert refused.outcome == feedback_pb.DeliveryOutcome.Value("REJECTED"), refused
        assert refused.outcome_reason == feedback_pb.OutcomeReason.Value("OUTCOME_REASON_CHANNEL_NOT_REGISTERED"), refused
    finally:
        feedback.close()


def test_the_eleventh_channel_with_a_limit_of_ten_is_refused_without_asking_apple():
    dispatcher = stack.Dispatcher.stack()
    argv, env = dispatcher.launch_spec()
    feedback = Feedback()
    bundle_id = bundle("quota")
    try:
        os.kill(dispatcher.pid, signal.SIGTERM)
        dispatcher.exit_status(timeout=30)
        stack.Dispatcher.start(argv, {**env, "PUSH_CHANNEL_LIMIT": "10"}, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")
        feedback_pb = stack.pb("feedback_pb2")
        names = [f"c{i:02d}" for i in range(11)]
        for name in names[:10]:
            channel_command("CREATE", bundle_id, name)
        feedback.until(lambda: all(feedback.channel_events(n) for n in names[:10]), "ten ChannelEvents")
        assert all(feedback.channel_events(n)[0].channel_event.kind == feedback_pb.ChannelEvent.Kind.Value("CREATED")
                   for n in names[:10])
        at_apple = len([c for c in stack.simulator_admin("/admin/channels")["channels"] if c["bundle_id"] == bundle_id])
        channel_command("CREATE", bundle_id, names[10])
        failed = feedback.until(lambda: feedback.channel_events(names[10]), "the 11th ChannelEvent")[0].channel_event
        assert failed.kind == feedback_pb.ChannelEvent.Kind.Value("FAILED"), failed
        assert failed.outcome_reason == feedback_pb.OutcomeReason.Value("OUTCOME_REASON_CHANNEL_LIMIT"), failed
        assert failed.http_status == 0 and failed.apns_reason == "", "the limit was Apple's, not ours"
        assert at_apple == 10
        assert len([c for c in stack.simulator_admin("/admin/channels")["channels"] if c["bundle_id"] == bundle_id]) == 10
    finally:
        feedback.close()
        current = stack.Dispatcher.stack()
        if current.alive():
            os.kill(current.pid, signal.SIGTERM)
            current.exit_status(timeout=30)
        stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")


def test_a_broadcast_accepted_before_a_sigkill_is_not_sent_again_after_the_restart():
    """A request ahead of the broadcast on the same partition waits for one held answer, so the
    partition's offset cannot be committed past it: the restarted dispatcher reads the broadcast's
    record again, and must not broadcast it again."""
    dispatcher = stack.Dispatcher.stack()
    argv, env = dispatcher.launch_spec()
    feedback = Feedback()
    bundle_id, name = bundle("kill"), "final"
    user = f"live-kill-{uuid.uuid4()}"
    partition = 3
    try:
        event, feedback_pb = create(feedback, bundle_id, name)
        assert event.kind == feedback_pb.ChannelEvent.Kind.Value("CREATED"), event
        tokens = stack.insert_tokens(user, 20, bundle_id)
        stack.simulator_admin("/admin/faults", "PUT", {"hold": {"tokens": [tokens[0]]}})
        send, common = stack.pb("send_request_pb2"), stack.pb("common_pb2")
        held_id = f"held-{uuid.uuid4()}"
        held = send.SendRequest(request_id=held_id, user_ids=send.UserIds(user_ids=[user]), notification=send.Notification(
            bundle_id=bundle_id, environment=common.Environment.Value(ENVIRONMENT),
            push_type=common.PushType.Value("PUSH_TYPE_ALERT"), payload='{"aps":{"alert":"held"}}'))
        _, held_offset = stack.send_request(held, partition=partition)
        request_id = f"broadcast-{uuid.uuid4()}"
        _, broadcast_offset = stack.send_request(broadcast_request(request_id, bundle_id, event.channel_id), partition=partition)
        feedback.until(lambda: feedback.broadcast_reports(request_id), "the BroadcastReport before the kill")
        assert simulator_channel(event.channel_id)["broadcasts"] == 1
        os.kill(dispatcher.pid, signal.SIGKILL)
        dispatcher.exit_status(timeout=30)
        assert stack.committed(stack.SEND_REQUESTS, partition) <= held_offset, "the held request was committed"
        stack.simulator_admin("/admin/faults", "PUT", {})
        # As if the kill had come before Kafka acknowledged the broadcast's RequestCompleted: only its
        # send_log row (the intent row, with Apple's answer) says it was sent.
        stack.psql(f"DELETE FROM request_completions WHERE request_id = '{request_id}'")
        assert stack.psql(f"SELECT outcome FROM send_log_all WHERE request_id = '{request_id}'") == [["DELIVERED"]]

        stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")
        feedback.until(lambda: feedback.completions(held_id), "the held request's completion after the restart", timeout=120)
        # The restarted dispatcher read the partition again from the held request on, the broadcast's
        # record included: it republished the report under the same event id, and Apple was asked once.
        feedback.until(lambda: len(feedback.broadcast_reports(request_id)) >= 2, "the republished BroadcastReport")
        wait_for(lambda: stack.committed(stack.SEND_REQUESTS, partition) > broadcast_offset,
                 what="the broadcast's offset to be committed after the restart", timeout=60)
        reports = feedback.broadcast_reports(request_id)
        assert len({e.event_id for e in reports}) == 1
        assert all(e.broadcast_report.outcome == feedback_pb.DeliveryOutcome.Value("DELIVERED") for e in reports)
        assert simulator_channel(event.channel_id)["broadcasts"] == 1
    finally:
        feedback.close()
        stack.simulator_admin("/admin/faults", "PUT", {})
        if not stack.Dispatcher.stack().alive():
            stack.Dispatcher.start(argv, env, dispatcher.log, stack.VAR_DIR / "run" / "dispatcher.pid")
