"""The pairwise tournament of AFS-L, replayed in full for every GPU (slow, obviously right)."""
from voda.core.estimate import EpochTimes


def reference_afs_l(ordered, capacity):
    times = [EpochTimes(j) for j in ordered]
    held = [0] * len(ordered)
    free = capacity
    alive = [j.min_workers <= capacity for j in ordered]

    def length(i):
        x = held[i]
        return float("inf") if x == 0 else round(ordered[i].remaining_epochs * times[i](x), 6)

    def start(i):
        return round(ordered[i].remaining_epochs * times[i](ordered[i].min_workers), 6)

    def rel(i):  # (gain over S(now), gain over S(next))
        x = held[i]
        if x == 0:
            return float("inf"), 1.0
        now, after = times[i](x), times[i](x + 1)
        return round(now / after - 1.0, 12), round(1.0 - after / now, 12)

    def beats(w, c):
        if held[w] == 0 and held[c] == 0:
            return start(c) < start(w)
        if length(c) >= length(w):
            return rel(c)[1] > rel(w)[0]
        return rel(c)[0] >= rel(w)[1]

    while free > 0:
        for i, j in enumerate(ordered):
            if alive[i] and held[i] == 0 and j.min_workers > free:
                alive[i] = False
        contenders = [i for i in range(len(ordered)) if alive[i]]
        if not contenders:
            break
        w = contenders[0]
        for c in contenders[1:]:
            if beats(w, c):
                w = c
        take = ordered[w].min_workers if held[w] == 0 else 1
        held[w] += take
        free -= take
        if held[w] >= ordered[w].max_workers:
            alive[w] = False
    return {j.name: held[i] for i, j in enumerate(ordered)}
