"""``m3.storage`` from Python: all twelve managed-input store methods under the specification's
names and keyword arguments, on SQLite (and on PostgreSQL when the run has
``--m3-postgres-url``); records immutable, with timezone-aware times and plain dicts; the store's
clock; a ``repr()`` that never shows an answer, a lease token or an idempotency key."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, List

import pytest

from kit_support import ADDRESS, ADDRESS_KEY, address, address_round, new_id
from m3 import (
    ElicitationResponse,
    FormElicitationRequest,
    ManagedInputConflict,
    ManagedInputRecoveryError,
    ManagedInputStateError,
    PendingElicitationRound,
)
from m3.storage import (
    HarnessMetadata,
    ManagedInputLease,
    ManagedInputRecord,
    ManagedInputStatus,
    ManagedInputStore,
    RedactedResponse,
    SQLiteExecutionStore,
    SQLiteManagedInputStore,
)

#: What a redacted text must never hold: the answer's values, the lease token's and keys' own
#: spellings are checked per test.
SECRETS = ("1 Main Street", "Pune")


class ManualClock:
    """A store clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


def aware(value: datetime) -> bool:
    return value.tzinfo is not None and value.utcoffset() is not None


def test_a_round_goes_through_every_status_with_the_worker_methods(
    managed_store: ManagedInputStore,
) -> None:
    round_id, execution_id = new_id("round"), new_id("exec")
    created = managed_store.create_round(
        address_round(round_id, execution_id),
        round_index=0,
        round_limit=3,
        owner_id="worker-1",
        lease_ttl=30.0,
        operation_parameters={"item": "book", "quantity": 1},
        harness=HarnessMetadata(session_id="session-1", resume_token="resume-secret", turn_id="t1"),
    )
    assert isinstance(created, ManagedInputRecord)
    assert created.round_id == round_id
    assert created.status is ManagedInputStatus.PENDING
    assert (created.round_index, created.round_limit) == (0, 3)
    assert created.delivery_attempts == 0
    assert created.responses is None and created.idempotency_key is None
    assert created.failure is None and created.failure_code is None
    assert type(created.operation_parameters) is dict
    assert created.operation_parameters == {"item": "book", "quantity": 1}
    assert created.harness == HarnessMetadata("session-1", "resume-secret", "t1")
    assert created.pending.execution_id == execution_id
    assert created.pending.operation_kind == "tool"
    assert type(created.pending.requests) is dict
    assert list(created.pending.requests) == [ADDRESS_KEY]
    lease = created.lease
    assert lease is not None and lease.owner_id == "worker-1"
    assert aware(lease.expires_at) and aware(created.timestamps.created_at)

    got = managed_store.get_round(round_id)
    assert got is not None and got.status is ManagedInputStatus.PENDING
    assert managed_store.get_round(new_id("missing")) is None
    assert [r.round_id for r in managed_store.list_rounds(execution_id=execution_id)] == [round_id]
    assert managed_store.list_rounds(
        execution_id=execution_id, status=ManagedInputStatus.RESOLVED
    ) == []

    renewed = managed_store.renew(round_id, lease, lease_ttl=60.0)
    assert renewed.owner_id == "worker-1"
    assert renewed.expires_at > lease.expires_at

    assert managed_store.redacted_responses(round_id) is None
    answered = managed_store.submit_responses(round_id, address(), idempotency_key="key-1")
    assert answered.status is ManagedInputStatus.RESPONSE_VALIDATED
    assert answered.responses == address()
    assert answered.idempotency_key == "key-1"
    assert answered.timestamps.response_validated_at is not None
    # The same key and answers again: the stored record, nothing changed.
    again = managed_store.submit_responses(round_id, address(), idempotency_key="key-1")
    assert again.status is ManagedInputStatus.RESPONSE_VALIDATED
    assert again.timestamps.response_validated_at == answered.timestamps.response_validated_at

    started = managed_store.start_delivery(round_id, renewed, delivery_idempotency_key="delivery-1")
    assert started.status is ManagedInputStatus.DELIVERY_STARTED
    assert started.delivery_attempts == 1
    assert started.delivery_idempotency_key == "delivery-1"
    delivered = managed_store.mark_delivered(round_id, renewed)
    assert delivered.status is ManagedInputStatus.DELIVERED
    resolved = managed_store.resolve(round_id, renewed)
    assert resolved.status is ManagedInputStatus.RESOLVED
    stamps = resolved.timestamps
    for stamp in (
        stamps.created_at,
        stamps.updated_at,
        stamps.response_validated_at,
        stamps.delivery_started_at,
        stamps.delivered_at,
        stamps.resolved_at,
    ):
        assert stamp is not None and aware(stamp)
    assert stamps.failed_at is None
    assert [r.round_id for r in managed_store.list_rounds(
        execution_id=execution_id, status=ManagedInputStatus.RESOLVED
    )] == [round_id]

    redacted = managed_store.redacted_responses(round_id)
    assert redacted is not None
    assert redacted == [
        RedactedResponse(
            request_key=ADDRESS_KEY,
            action="accept",
            content_fields=("city", "street"),
            content_bytes=redacted[0].content_bytes,
        )
    ]
    assert redacted[0].content_bytes > 0
    assert not any(secret in repr(redacted) for secret in SECRETS)
    # A resolved round takes no more writes.
    with pytest.raises(ManagedInputStateError) as caught:
        managed_store.fail(round_id, renewed, "server_error", "too late")
    assert caught.value.code == "round_terminal"


def test_claim_takes_an_unowned_round_and_the_lease_is_compare_and_set(
    managed_store: ManagedInputStore,
) -> None:
    round_id = new_id("round")
    created = managed_store.create_round(address_round(round_id, new_id("exec")))
    assert created.lease is None
    first = managed_store.claim_round(round_id, "worker-1", lease_ttl=30.0)
    assert isinstance(first, ManagedInputLease) and first.owner_id == "worker-1"
    with pytest.raises(ManagedInputConflict) as held:
        managed_store.claim_round(round_id, "worker-2", lease_ttl=30.0)
    assert held.value.code == "lease_held"
    rotated = managed_store.claim_round(round_id, "worker-1", lease_ttl=30.0)
    assert rotated.owner_id == "worker-1"
    assert rotated.lease_token != first.lease_token
    # The rotated-out token is stale: a write with it is refused, and nothing changes.
    with pytest.raises(ManagedInputConflict) as stale:
        managed_store.renew(round_id, first, lease_ttl=30.0)
    assert stale.value.code == "lease_mismatch"
    stored = managed_store.get_round(round_id)
    assert stored is not None and stored.lease == rotated
    # Another owner's id with the live token is refused too.
    forged = dataclasses.replace(rotated, owner_id="worker-2")
    with pytest.raises(ManagedInputConflict) as other:
        managed_store.renew(round_id, forged, lease_ttl=30.0)
    assert other.value.code == "lease_mismatch"


def test_fail_records_the_failure_code_and_message(managed_store: ManagedInputStore) -> None:
    round_id = new_id("round")
    lease = managed_store.claim_round(
        managed_store.create_round(address_round(round_id, new_id("exec"))).round_id, "worker-1"
    )
    failed = managed_store.fail(round_id, lease, "server_error", "the server broke")
    assert failed.status is ManagedInputStatus.FAILED
    assert failed.failure_code == "server_error"
    assert failed.failure_message is not None and "the server broke" in failed.failure_message
    assert failed.timestamps.failed_at is not None and aware(failed.timestamps.failed_at)
    with pytest.raises(ManagedInputStateError) as caught:
        managed_store.submit_responses(round_id, address(), idempotency_key="late")
    assert caught.value.code == "round_terminal"


def test_list_rounds_filters_by_execution_and_status_and_limits(
    managed_store: ManagedInputStore,
) -> None:
    execution_id = new_id("exec")
    ids = [new_id(f"round{n}") for n in range(3)]
    for n, round_id in enumerate(ids):
        managed_store.create_round(address_round(round_id, execution_id), round_index=n)
    managed_store.submit_responses(ids[1], address(), idempotency_key="k")
    listed = managed_store.list_rounds(execution_id=execution_id)
    assert [r.round_id for r in listed] == ids, "oldest first"
    pending = managed_store.list_rounds(
        execution_id=execution_id, status=ManagedInputStatus.PENDING
    )
    assert [r.round_id for r in pending] == [ids[0], ids[2]]
    assert len(managed_store.list_rounds(execution_id=execution_id, limit=2)) == 2
    assert managed_store.list_rounds(execution_id=new_id("nobody")) == []


def test_fail_recovery_fails_a_dead_worker_s_round_for_good(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite", clock=clock)
    created = store.create_round(address_round("r1"), owner_id="worker-1", lease_ttl=5.0)
    assert created.timestamps.created_at == T0
    assert created.pending.created_at == T0
    assert created.lease is not None and created.lease.expires_at == T0 + timedelta(seconds=5)
    clock.advance(10)
    failed = store.fail_recovery("r1", message="the worker is gone")
    assert failed.status is ManagedInputStatus.FAILED
    assert failed.failure_code == "recovery_unavailable"
    assert failed.timestamps.failed_at == T0 + timedelta(seconds=10)
    with pytest.raises(ManagedInputRecoveryError) as late:
        store.submit_responses("r1", address(), idempotency_key="late")
    assert late.value.code == "recovery_unavailable"
    with pytest.raises(ManagedInputRecoveryError) as reclaim:
        store.claim_round("r1", "worker-2")
    assert reclaim.value.code == "recovery_unavailable"


def test_the_supplied_clock_is_honoured_and_deadlines_are_stored(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite", busy_timeout_ms=2000, clock=clock)
    deadline = T0 + timedelta(hours=1)
    created = store.create_round(address_round("r1", deadline=deadline))
    assert created.pending.deadline == deadline
    assert created.timestamps.created_at == T0
    # A deadline given in another zone is the same instant.
    other_zone = timezone(timedelta(hours=5, minutes=30))
    created = store.create_round(address_round("r2", deadline=deadline.astimezone(other_zone)))
    assert created.pending.deadline == deadline
    assert created.pending.deadline is not None
    assert created.pending.deadline.utcoffset() == timedelta(0)


def test_a_clock_that_returns_a_naive_datetime_is_refused(tmp_path: Path) -> None:
    naive: Callable[[], datetime] = lambda: datetime(2026, 11, 30, 12, 0, 0)  # noqa: E731
    with pytest.raises(ValueError) as caught:
        SQLiteManagedInputStore(tmp_path / "naive.sqlite", clock=naive)
    assert "naive" in str(caught.value) and "timezone-aware" in str(caught.value)
    with pytest.raises(ValueError) as not_a_time:
        SQLiteManagedInputStore(tmp_path / "naive.sqlite", clock=lambda: "noon")  # type: ignore[arg-type, return-value]
    assert "datetime" in str(not_a_time.value)
    # A clock that turns naive later: the call that read it says so.
    readings: List[datetime] = [T0]

    def turning() -> datetime:
        return readings[-1]

    store = SQLiteManagedInputStore(tmp_path / "turning.sqlite", clock=turning)
    readings.append(datetime(2026, 11, 30, 12, 0, 1))
    with pytest.raises(ValueError) as later:
        store.create_round(address_round("r1"))
    assert "naive" in str(later.value)


def test_records_are_immutable_plain_and_timezone_aware(tmp_path: Path) -> None:
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite")
    record = store.create_round(address_round("r1"), owner_id="worker-1")
    for target, name in [
        (record, "status"),
        (record.pending, "round_id"),
        (record.timestamps, "created_at"),
        (record.harness, "session_id"),
        (record.lease, "lease_token"),
    ]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(target, name, None)
    response = ElicitationResponse(action="accept", content=ADDRESS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(response, "action", "decline")
    pending = record.pending
    assert isinstance(pending, PendingElicitationRound)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(pending.requests[ADDRESS_KEY], "message", "changed")
    request = pending.requests[ADDRESS_KEY]
    assert isinstance(request, FormElicitationRequest) and request.mode == "form"
    assert type(request.requested_schema) is dict
    assert aware(pending.created_at) and pending.created_at.utcoffset() == timedelta(0)
    now = datetime.now(timezone.utc)
    assert abs((pending.created_at - now).total_seconds()) < 60
    assert ManagedInputStatus("pending") is ManagedInputStatus.PENDING
    assert str(ManagedInputStatus.RESPONSE_VALIDATED) == "response_validated"
    assert {s.value for s in ManagedInputStatus} == {
        "pending",
        "response_validated",
        "delivery_started",
        "delivered",
        "resolved",
        "failed",
    }


def test_repr_never_shows_an_answer_a_lease_token_or_an_idempotency_key(tmp_path: Path) -> None:
    store = SQLiteManagedInputStore(tmp_path / "rounds.sqlite")
    created = store.create_round(
        address_round("r1"),
        owner_id="worker-1",
        harness=HarnessMetadata(resume_token="resume-secret-token"),
    )
    lease = created.lease
    assert lease is not None
    answered = store.submit_responses("r1", address(), idempotency_key="idem-secret-key")
    started = store.start_delivery("r1", lease, delivery_idempotency_key="delivery-secret-key")
    secrets = [
        *SECRETS,
        lease.lease_token,
        "idem-secret-key",
        "delivery-secret-key",
        "resume-secret-token",
    ]
    shown = [
        repr(lease),
        repr(answered),
        repr(started),
        str(answered),
        repr(answered.responses),
        repr(address()),
        repr(ElicitationResponse(action="accept", content=ADDRESS)),
        repr(created.harness),
        repr(store),
    ]
    for text in shown:
        for secret in secrets:
            assert secret not in text, f"{secret!r} shown in {text!r}"
    assert "<redacted>" in repr(lease)
    assert "worker-1" in repr(lease)


def test_the_store_protocol_and_the_execution_store_s_resolved_store(tmp_path: Path) -> None:
    path = tmp_path / "executions.sqlite"
    executions = SQLiteExecutionStore(path)
    assert not path.exists(), "nothing is opened until the managed-input store is needed"
    resolved = executions.managed_input_store()
    assert isinstance(resolved, ManagedInputStore)
    resolved.create_round(address_round("r1"))
    assert path.exists()
    # Reopening: another store object on the same path reads the round and its status.
    executions.close()
    reader: ManagedInputStore = SQLiteManagedInputStore(str(path))
    assert isinstance(reader, ManagedInputStore)
    record = reader.get_round("r1")
    assert record is not None and record.status is ManagedInputStatus.PENDING
    with SQLiteExecutionStore(path) as reopened:
        again = reopened.managed_input_store().get_round("r1")
        assert again is not None and again.round_id == "r1"
