"""How long the reader asks a broker to hold a fetch, decided from what the broker does.

Pure: no I/O, no clock reads.

A fetch that finds no record is held by the broker up to its max wait. Brokers differ
in what they do when a record arrives meanwhile:

* Apache Kafka (and most brokers of its protocol) answers the held fetch as soon as
  the record is readable: there a long wait costs no latency, and a short one only
  multiplies empty fetches (at 30 partitions a round a second on three brokers, a
  100 ms wait cost the probe 1.9x the CPU per canary of a 1 s wait, measured);
* the embedded broker (Tansu) looks for records now and then while it holds a fetch,
  and some fetches it holds to their max wait whatever arrives: there the wait bounds
  measured latency, and must stay short.

So the reader starts with the short wait and watches the **read delay** of its own
canaries: from the broker's acknowledgement to the fetch that brought the canary
back (0 when the fetch came first). A broker that answers as records arrive reads
them back within a few milliseconds whatever the wait; one that holds fetches spreads
them over its wait. Measured on this project's 2-core VM at a 100 ms wait, 30
partitions: Apache Kafka's three brokers read 90 % of canaries back within 2 to 4 ms
of their acknowledgement, the embedded broker within 20 to 51 ms (at a 1 s wait:
499 ms). After ``SAMPLE`` canaries, a 90th percentile of at most a tenth of the short
wait takes the long wait; at the long wait, one above the short wait (records read
later than the short wait would have read them) takes the short wait back, and every
such failed try doubles the decisions in a row that must pass before the next one:
a broker that holds fetches is not tried again and again. The two thresholds are a
factor ten apart, so a decision does not flap.

A wait given in the configuration is pinned: never changed.
"""

from __future__ import annotations

# The wait for brokers that hold fetches, and the one for brokers that answer as
# records arrive (the Java consumer's default is 500 ms, librdkafka's 500 ms,
# franz-go's 5 s; longer saves little more and holds a consumer's other requests
# longer: a broker handles one request of a connection at a time, so an offset
# lookup or metadata refresh sent behind a held fetch waits for it).
SHORT = 0.1
LONG = 1.0
# Canaries read back per decision.
SAMPLE = 30
# At the short wait, read delays this small (as a share of the short wait) mean the
# broker answers as records arrive.
ANSWERS_AT_ONCE = 0.1


def percentile_90(delays: list[float]) -> float:
    """The 90th percentile (nearest rank) of some delays.

    >>> percentile_90([0.0] * 9 + [1.0])
    0.0
    >>> percentile_90([0.0] * 8 + [1.0, 2.0])
    1.0
    """
    ranked = sorted(delays)
    return ranked[min(len(ranked) - 1, max(0, -(-9 * len(ranked) // 10) - 1))]


class FetchWait:
    """The reader's fetch max wait, seconds: pinned, or decided by read delays.

    >>> wait = FetchWait(None, sample=3)
    >>> wait.seconds, [wait.read_after(d) for d in (0.001, 0.0, 0.002)]
    (0.1, [None, None, 1.0])
    >>> [wait.read_after(d) for d in (0.2, 0.3, 0.001)], wait.seconds
    ([None, None, 0.1], 0.1)
    >>> [wait.read_after(0.001) for _ in range(6)]  # a failed try: two passes now
    [None, None, None, None, None, 1.0]
    >>> pinned = FetchWait(0.5, sample=1)
    >>> pinned.read_after(0.0), pinned.seconds, pinned.adapts
    (None, 0.5, False)
    """

    def __init__(
        self,
        pinned: float | None,
        *,
        short: float = SHORT,
        long: float = LONG,
        sample: int = SAMPLE,
    ) -> None:
        self._pinned = pinned
        self._short = short
        self._long = long
        self._sample = sample
        self._delays: list[float] = []
        self.seconds = short if pinned is None else pinned
        # The 90th percentile read delay behind the last decision (None before one).
        self.last_p90: float | None = None
        # Decisions in a row that found the broker answering at once, at the short
        # wait; tries of the long wait that failed (each doubles the passes needed).
        self._passed = 0
        self._failed = 0

    @property
    def adapts(self) -> bool:
        return self._pinned is None

    @property
    def short(self) -> float:
        """The wait before any decision, and after a reset: the pinned one if pinned."""
        return self._short if self._pinned is None else self._pinned

    def read_after(self, delay: float) -> float | None:
        """One canary read back ``delay`` seconds after its acknowledgement (0 if read
        before it); the new wait if this decides a change, else None."""
        if self._pinned is not None:
            return None
        self._delays.append(max(0.0, delay))
        if len(self._delays) < self._sample:
            return None
        p90 = percentile_90(self._delays)
        self._delays.clear()
        self.last_p90 = p90
        if self.seconds == self._short:
            self._passed = self._passed + 1 if p90 <= ANSWERS_AT_ONCE * self._short else 0
            if self._passed < 2**self._failed:
                return None
            self._passed = 0
            self.seconds = self._long
        elif p90 > self._short:
            self._failed += 1
            self.seconds = self._short
        else:
            return None
        return self.seconds

    def reset(self) -> float | None:
        """Back to the short wait, the samples forgotten; the new wait if it changed."""
        self._delays.clear()
        if self.seconds == self.short:
            return None
        self.seconds = self.short
        return self.seconds
