#!/usr/bin/python3
"""Cross-check of claw's rank groups against Megatron-Core's algorithm.

Transcribes, from its documented behaviour, Megatron-Core's
generate_masked_orthogonal_rank_groups, RankGenerator (get_mask, get_ranks),
default_embedding_ranks and the size checks and assertions of
initialize_model_parallel (megatron/core/parallel_state.py), then runs
rank_groups_dump (claw's RankGrid) on a sweep of configurations and compares
every group list, rank coordinate and refusal.

    rank_groups_reference.py path/to/rank_groups_dump
"""
import itertools
import subprocess
import sys

NAMES = ["tp", "cp", "ep", "dp", "pp"]
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


def exclusive_prefix_products(sizes):
    out = [1]
    for s in sizes:
        out.append(out[-1] * s)
    return out


def digits(index, shape, stride=None):
    """index = sum(d[i] * stride[i]) with stride the prefix products of shape."""
    if stride is None:
        stride = exclusive_prefix_products(shape)
    d = [(index // st) % s for s, st in zip(shape, stride)]
    assert index < stride[-1]  # else the digits would not add back up to index
    return d


def masked_orthogonal_rank_groups(world_size, parallel_size, mask):
    """Megatron-Core's generate_masked_orthogonal_rank_groups.

    A world rank is sum(coord[i] * global_stride[i]); a group holds the ranks
    whose unmasked coordinates are fixed (group index = those coordinates in
    mixed radix, first dimension fastest) while the masked ones run through
    their range (rank in group = those coordinates in mixed radix).
    """
    global_stride = exclusive_prefix_products(parallel_size)
    masked_shape = [s for s, m in zip(parallel_size, mask) if m]
    masked_stride = [st for st, m in zip(global_stride, mask) if m]
    unmasked_shape = [s for s, m in zip(parallel_size, mask) if not m]
    unmasked_stride = [st for st, m in zip(global_stride, mask) if not m]
    masked_radix = exclusive_prefix_products(masked_shape)
    unmasked_radix = exclusive_prefix_products(unmasked_shape)
    group_size = masked_radix[-1]
    # The masked part of a rank depends only on its index in the group: the
    # same offsets for every group (Megatron recomputes them per group).
    in_group = [sum(d * st for d, st in zip(digits(i, masked_shape, masked_radix), masked_stride))
                for i in range(group_size)]
    groups = []
    for group_index in range(world_size // group_size):
        base = sum(d * st for d, st in zip(digits(group_index, unmasked_shape, unmasked_radix), unmasked_stride))
        groups.append([base + off for off in in_group])
    return groups


class Generator:
    """Megatron-Core's RankGenerator (rank_offset 0)."""

    def __init__(self, tp, ep, dp, pp, cp, order):
        assert ep == 1 or cp == 1
        self.size = {"tp": tp, "ep": ep, "dp": dp, "pp": pp, "cp": cp}
        self.world = tp * ep * dp * pp * cp
        self.order = order.lower()
        for name in NAMES:  # names left out of the order must have size 1 and go last
            if name not in self.order.split("-"):
                if self.size[name] != 1:
                    raise ValueError(f"{name} not in order")
                self.order += "-" + name
        self.ordered_size = [self.size[n] for n in self.order.split("-")]

    def mask(self, token):
        dims = self.order.split("-")
        m = [False] * len(dims)
        for t in token.split("-"):
            m[dims.index(t)] = True
        return m

    def get_ranks(self, token):
        return masked_orthogonal_rank_groups(self.world, self.ordered_size, self.mask(token))


def embedding_lists(pp_groups):
    """default_embedding_ranks per pipeline group, plus (for World::split,
    which needs a partition) each middle stage alone."""
    out = []
    for stages in pp_groups:
        out.append([stages[0]] if len(stages) == 1 else [stages[0], stages[-1]])
        out.extend([r] for r in stages[1:-1])
    return out


def expected(world, tp, cp, ep, pp, order, items):
    """The lines rank_groups_dump prints for one configuration, or ["error"]."""
    # initialize_model_parallel's checks.
    if world % (tp * pp * cp):
        return ["error"]
    dp = world // (tp * pp * cp)
    if world % (tp * ep * pp):  # expert tensor parallel = tp
        return ["error"]
    expert_dp = world // (tp * ep * pp)
    dense = Generator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order=order)
    expert = Generator(tp=tp, ep=ep, dp=expert_dp, pp=pp, cp=1, order=order)
    if not (order.endswith("pp") or pp == 1 or expert_dp == dp):
        return ["error"]
    if dense.get_ranks("pp") != expert.get_ranks("pp"):
        return ["error"]

    def fmt(label, lists):
        return " ".join([label] + [",".join(map(str, l)) for l in lists])

    lines = []
    for item in items:
        if item.startswith("dense:"):
            lines.append(fmt(item, dense.get_ranks(item[6:])))
        elif item.startswith("expert:"):
            lines.append(fmt(item, expert.get_ranks(item[7:])))
        elif item == "embedding":
            lines.append(fmt(item, embedding_lists(dense.get_ranks("pp"))))
        elif item == "coords":
            dims = dense.order.split("-")
            coords = []
            for r in range(world):
                d = dict(zip(dims, digits(r, dense.ordered_size)))
                coords.append([d["tp"], d["cp"], d["dp"], d["pp"]])
            lines.append(fmt(item, coords))
    return lines


def configs(world):
    """Every tp, cp, pp dividing the world and ep dividing dp * cp, plus
    ep = dp * cp + 1, which must be refused."""
    for tp in range(1, world + 1):
        for cp in range(1, world // tp + 1):
            for pp in range(1, world // (tp * cp) + 1):
                if world % (tp * cp * pp):
                    continue
                dp = world // (tp * cp * pp)
                for ep in range(1, dp * cp + 2):
                    if (dp * cp) % ep == 0 or ep == dp * cp + 1:
                        yield tp, cp, ep, pp


def main():
    dump = sys.argv[1]
    subsets = ["-".join(c) for k in range(1, 6) for c in itertools.combinations(NAMES, k)]
    all_items = [f"dense:{t}" for t in subsets] + [f"expert:{t}" for t in subsets] + ["embedding", "coords"]
    # The groups ParallelState creates; token names deliberately out of order in places.
    state_items = ["dense:tp", "dense:cp", "dense:dp", "dense:pp", "dense:dp-cp", "dense:pp-tp", "expert:ep",
                   "expert:dp", "expert:tp-ep", "embedding", "coords"]
    orders = ["-".join(p) for p in itertools.permutations(NAMES)]
    sweep = []
    for world in [*range(1, 13), 16]:  # every token, default order and Megatron's tp-pp-dp mapping
        for c in configs(world):
            for order in [DEFAULT_ORDER, "tp-cp-ep-pp-dp"]:
                sweep.append((world, *c, order, all_items))
    for world in [6, 8]:  # every order, including the ones Megatron refuses
        for c in configs(world):
            for order in orders:
                sweep.append((world, *c, order, state_items))
    for world in [24, 64]:  # larger worlds, the groups ParallelState creates
        for c in configs(world):
            sweep.append((world, *c, DEFAULT_ORDER, state_items))

    request = "".join(" ".join(map(str, s[:6])) + " " + " ".join(s[6]) + "\n" for s in sweep)
    got = subprocess.run([dump], input=request, capture_output=True, text=True, check=True).stdout.splitlines()
    want = []
    for s in sweep:
        want.append("config " + " ".join(map(str, s[:6])) + " " + " ".join(s[6]))
        want.extend(expected(*s))
    refused = sum(1 for l in want if l == "error")
    for i, (g, w) in enumerate(itertools.zip_longest(got, want)):
        if g != w:
            context = next((want[j] for j in range(i, -1, -1) if want[j].startswith("config ")), "")
            print(f"mismatch at line {i + 1} ({context[:120]}):\n  claw:     {str(g)[:400]}\n"
                  f"  megatron: {str(w)[:400]}")
            return 1
    print(f"{len(sweep)} configurations ({refused} refused by both), {len(want)} lines identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
