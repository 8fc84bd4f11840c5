"""Schedule slots, run keys and the (optionally compressed) clock of workflow runs.

A run is one slot of a spec's schedule: a 5-field cron expression (via croniter) or a list of
one-off times, in an IANA time zone.  Its key ``NAME-DIGEST10-SLOT`` is stable, so submitting
the same run twice is recognised.  :class:`Clock` lets tests and demos run a schedule in
compressed time.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import dataclass

from ..errors import ParameterError

__all__ = ["UTC", "Clock", "fill", "parse_time", "run_key", "slot_id", "slots_between", "latest_slot", "next_slot",
           "check_cron", "zone"]

UTC = dt.timezone.utc


def parse_time(value, tz: dt.tzinfo = UTC) -> dt.datetime:
    """An aware UTC datetime from an ISO 8601 string or a datetime (naive ones are in ``tz``)."""
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, dt.date):
        t = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            t = dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an ISO 8601 time: {value!r}") from None
    else:
        raise ValueError(f"not a time: {value!r}")
    if t.tzinfo is None:
        t = t.replace(tzinfo=tz)
    return t.astimezone(UTC)


def zone(name) -> dt.tzinfo:
    """The time zone named ``name`` (``UTC`` or an IANA name); ValueError if there is none."""
    if not isinstance(name, str):
        raise ValueError(f"not a time zone name: {name!r}")
    if name.upper() == "UTC":
        return UTC
    from zoneinfo import ZoneInfo

    try:
        return ZoneInfo(name)
    except Exception:
        raise ValueError(f"unknown time zone {name!r}") from None



def slot_id(slot: dt.datetime | None) -> str:
    return "once" if slot is None else slot.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def run_key(spec, slot: dt.datetime | None) -> str:
    """Stable key of one run: ``NAME-DIGEST10-SLOT``."""
    return f"{spec.name}-{spec.digest[:10]}-{slot_id(slot)}"


def slots_between(schedule: dict, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """Times of ``schedule`` strictly after ``start`` and at or before ``end`` (aware UTC datetimes)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    if "at" in schedule:
        times = [parse_time(t) for t in schedule["at"]]
        return [t for t in times if start < t <= end]
    from croniter import croniter

    tz = zone(schedule.get("timezone", "UTC"))
    it = croniter(schedule["cron"], start.astimezone(tz))
    out = []
    while True:
        t = it.get_next(dt.datetime).astimezone(UTC)
        if t > end:
            return out
        out.append(t)
        if len(out) > 100_000:
            raise ParameterError("schedule: more than 100,000 slots in the window; shorten it")


def check_cron(expr: str) -> str:
    """``expr`` normalised, if it is a valid 5-field cron expression that fires; ValueError otherwise."""
    from croniter import croniter

    fields = str(expr).split()
    if len(fields) != 5 or not croniter.is_valid(" ".join(fields)):
        raise ValueError("expected 5 fields 'minute hour day-of-month month day-of-week'")
    text = " ".join(fields)
    try:   # valid fields that name no existing day ('0 0 31 2 *') never fire
        croniter(text, dt.datetime(2000, 1, 1, tzinfo=UTC)).get_next(dt.datetime)
    except Exception:
        raise ValueError("the expression names no date that exists, so it never fires") from None
    return text


def _cron(schedule: dict, t: dt.datetime):
    from croniter import croniter

    return croniter(schedule["cron"], t.astimezone(zone(schedule.get("timezone", "UTC"))))


def latest_slot(schedule: dict, now: dt.datetime, within: dt.timedelta = dt.timedelta(days=366)) -> dt.datetime | None:
    """The last time of ``schedule`` at or before ``now`` and at most ``within`` before it (UTC), or None.

    Found directly (one step back of the cron iterator), so a frequent schedule (``* * * * *``)
    costs no more than a daily one.
    """
    now = now.astimezone(UTC)
    if "at" in schedule:
        past = [t for t in (parse_time(x) for x in schedule["at"]) if t <= now]
        t = max(past) if past else None
    else:
        t = _cron(schedule, now).get_prev(dt.datetime).astimezone(UTC)
        after = _cron(schedule, t).get_next(dt.datetime).astimezone(UTC)
        if after <= now:          # ``now`` is itself a slot: get_prev steps strictly before it
            t = after
    return t if t is not None and now - t <= within else None


def next_slot(schedule: dict, now: dt.datetime, within: dt.timedelta = dt.timedelta(days=366)) -> dt.datetime | None:
    """The first time of ``schedule`` after ``now`` and at most ``within`` after it (UTC), or None."""
    now = now.astimezone(UTC)
    if "at" in schedule:
        future = [t for t in (parse_time(x) for x in schedule["at"]) if t > now]
        t = min(future) if future else None
    else:
        t = _cron(schedule, now).get_next(dt.datetime).astimezone(UTC)
    return t if t is not None and t - now <= within else None


def check_slot(schedule: dict | None, slot: dt.datetime | None) -> None:
    """Refuse a ``--slot`` that is not a time of ``schedule`` (or given for a spec with none): its run
    key, paths and report would name a slot the schedule never has, beside the scheduled run's."""
    if slot is None:
        return
    if not schedule:
        raise ParameterError("--slot: the spec has no schedule")
    if latest_slot(schedule, slot, within=dt.timedelta(0)) is None:
        near = [t for t in (latest_slot(schedule, slot), next_slot(schedule, slot)) if t is not None]
        what = f"cron {schedule['cron']!r} in {schedule.get('timezone', 'UTC')}" if "cron" in schedule else "its 'at' times"
        raise ParameterError(f"--slot: {slot.astimezone(UTC).isoformat()} is not a slot of the schedule ({what})"
                             + (f"; the nearest: {' and '.join(t.isoformat() for t in near)}" if near else ""))


def fill(text: str, spec_name: str, slot: dt.datetime | None) -> str:
    """Fill the placeholders of a path or filter value for one run."""
    s = (slot or dt.datetime.now(UTC)).astimezone(UTC)
    values = {"name": spec_name, "slot": slot_id(slot) if slot else "once", "date": s.strftime("%Y-%m-%d"),
              "yesterday": (s - dt.timedelta(days=1)).strftime("%Y-%m-%d"), "time": s.strftime("%H%M%S")}
    return text.format(**values)


@dataclass(frozen=True)
class Clock:
    """Wall clock, optionally compressed: simulated time runs ``speed`` times faster than real time.

    ``Clock()`` is the real clock.  ``Clock(speed=60, sim_origin=..., real_origin=...)`` maps the
    real epoch second ``real_origin`` to the simulated epoch second ``sim_origin`` and runs sixty
    simulated seconds per real one, so a cron schedule fires every real second per minute slot:
    used by tests and demos.  The environment variable ``DASKMICRO_CLOCK`` =
    ``SIM_ISO,REAL_EPOCH,SPEED`` sets it for the CLI.
    """

    speed: float = 1.0
    sim_origin: float = 0.0
    real_origin: float = 0.0

    def now(self) -> dt.datetime:
        real = time.time()
        sim = real if self.speed == 1.0 and self.sim_origin == self.real_origin else \
            self.sim_origin + (real - self.real_origin) * self.speed
        return dt.datetime.fromtimestamp(sim, UTC)

    def real_time(self, t: dt.datetime) -> float:
        """Real epoch seconds at which the simulated time ``t`` comes."""
        return self.real_origin + (t.timestamp() - self.sim_origin) / self.speed

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.speed, self.sim_origin, self.real_origin)

    @classmethod
    def from_env(cls) -> "Clock":
        text = os.environ.get("DASKMICRO_CLOCK")
        if not text:
            return cls()
        try:
            sim, real, speed = text.split(",")
            clock = cls(speed=float(speed), sim_origin=parse_time(sim).timestamp(), real_origin=float(real))
        except ValueError:
            raise ParameterError(f"DASKMICRO_CLOCK: expected SIM_ISO,REAL_EPOCH,SPEED, got {text!r}") from None
        if not clock.speed > 0:
            raise ParameterError(f"DASKMICRO_CLOCK: speed must be > 0, got {clock.speed}")
        return clock
