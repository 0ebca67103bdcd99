"""alternation.py: a cost measured inside one process, by switching it off and on in blocks of
steps (the samples' --gpu-alternate and --alternate).

After `warmup` steps, blocks of `block` steps alternate between the two states in pairs whose
order flips (on-off, off-on, on-off, ...), so that a drift over the run cancels out; each
block's rate is timed over its steps after the first `settle`, so the other state's work in
flight has drained. The summary is the paired ratio, rate on / rate off, per pair, as a mean
with its 95 % interval (Student's t) and a median, and the CPU time per step of each state.
Processes of one job that step in lockstep (DDP ranks) switch at the same steps.
"""
import time

# Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


class Alternation:
    """Calls turn_on() / turn_off() at block starts; at_step(step) after each step's end."""

    def __init__(self, block, settle, warmup, turn_on, turn_off, label, on_word="recorded", off_word="paused"):
        self.block, self.settle, self.warmup = block, settle, warmup
        self.turn_on, self.turn_off, self.label = turn_on, turn_off, label
        self.on_word, self.off_word = on_word, off_word
        self.paused = False   # the state now: off
        self.mark = None      # (time, cpu time) at the block's settle point
        self.blocks = []      # (on, seconds per step, CPU seconds per step)
        self.apply(0)

    def state(self, k):
        """Whether block k is on: pair k // 2, first or second of it."""
        first_on = (k // 2) % 2 == 0
        return first_on if k % 2 == 0 else not first_on

    def apply(self, k):
        on = self.state(k)
        if on and self.paused:
            self.turn_on()
        elif not on and not self.paused:
            self.turn_off()
        self.paused = not on

    def at_step(self, step):
        if step < self.warmup:
            return
        k, i = divmod(step - self.warmup, self.block)
        if i == 0 and step > self.warmup and self.mark:
            # step ends block k - 1: its steps settle..block-1 were timed
            n = self.block - self.settle
            now, cpu = time.perf_counter(), time.process_time()
            self.blocks.append((self.state(k - 1), (now - self.mark[0]) / n, (cpu - self.mark[1]) / n))
            self.mark = None
        if i == 0:
            self.apply(k)
        if i == self.settle:
            self.mark = (time.perf_counter(), time.process_time())

    def ratios(self):
        """Per complete pair: (rate on / rate off, CPU s per step on, off)."""
        out = []
        for j in range(len(self.blocks) // 2):
            a, b = self.blocks[2 * j], self.blocks[2 * j + 1]
            on, off = (a, b) if a[0] else (b, a)
            out.append((off[1] / on[1], on[2], off[2]))
        return out

    def summary(self):
        r = self.ratios()
        pairs = len(r)
        if pairs < 2:
            return "%s: %d block pair%s: too few for an interval (run more steps)" % (
                self.label, pairs, "" if pairs == 1 else "s")
        ratios = [x[0] for x in r]
        mean = sum(ratios) / pairs
        sd = (sum((v - mean) ** 2 for v in ratios) / (pairs - 1)) ** 0.5
        half = (_T975[pairs - 2] if pairs - 1 <= len(_T975) else 1.96) * sd / pairs ** 0.5
        s = sorted(ratios)
        med = s[pairs // 2] if pairs % 2 else (s[pairs // 2 - 1] + s[pairs // 2]) / 2
        return ("%s: %d block pairs of %d steps (%d timed): rate %s / %s mean %.4f, "
                "95%% interval [%.4f, %.4f], median %.4f; CPU ms per step %s %.3f, %s %.3f"
                % (self.label, pairs, self.block, self.block - self.settle, self.on_word, self.off_word, mean,
                   mean - half, mean + half, med, self.on_word, 1e3 * sum(x[1] for x in r) / pairs,
                   self.off_word, 1e3 * sum(x[2] for x in r) / pairs))
