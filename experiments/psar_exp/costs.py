"""The cost side of the experiments, from psar itself: the α-β-γ forms and
exact byte counts of the allreduce algorithms (the registry in
allreduce/registry.cc, stated in docs/algorithms.md) and of the parameter
server (ps/cost.h, docs/theory.md) come from `psar cost`; no formula of
either is written here. What lives here once: the parameter server's byte
counts and the fit of α and β to measured times.
"""

import json

from psar_exp import runner


class CostTable:
    """`psar cost` rows for every algorithm × p × n asked, keyed (algo, p, n)."""

    def __init__(self, rows, alpha=0.0, beta=0.0, gamma=0.0):
        # The parameter server's rows (algo "ps") carry their server count.
        self.rows = {(r["algo"], r["ranks"], r["size"], r.get("servers") or 0): r for r in rows}
        self.alpha, self.beta, self.gamma = alpha, beta, gamma

    def _row(self, algo, p, n, servers=0):
        try:
            return self.rows[(algo, int(p), int(n), int(servers))]
        except KeyError:
            raise KeyError(f"no cost row for {algo} at p = {p}, n = {n} bytes" +
                           (f", S = {servers}" if servers else "") +
                           " (not asked of psar cost)") from None

    def algos(self):
        return list(dict.fromkeys(a for a, _, _, s in self.rows if not s))

    def ps_time(self, N, S, n):
        """The parameter server's push_pull of n bytes by N workers over S
        shards at the table's α and β (query with servers=[S])."""
        return self._row("ps", N, n, S)["time_s"]

    def terms(self, algo, p, n):
        """Coefficients (a, b, c) of α, β, γ for one allreduce."""
        r = self._row(algo, p, n)
        return r["alpha_coef"], r["beta_coef"], r["gamma_coef"]

    def time(self, algo, p, n, alpha, beta, gamma=0.0):
        a, b, c = self.terms(algo, p, n)
        return a * alpha + b * beta + c * gamma

    def sent_total(self, algo, p, n):
        """Exact payload bytes sent by all ranks; None where Comm does not see them."""
        return self._row(algo, p, n)["bytes_sent_total"]

    def sent_busiest(self, algo, p, n):
        """Exact payload bytes sent by the busiest rank; None where Comm does not see them."""
        return self._row(algo, p, n)["bytes_sent_max_rank"]


def query(ranks, sizes, algos=None, segment_bytes=None, alpha=0.0, beta=0.0, gamma=0.0,
          psar=None, servers=None, workers_per_nic=1, chunk_bytes=None):
    """Runs `psar cost --format json` for every p in ranks and n in sizes
    (bytes, int or '4K'); algos None: every registered algorithm, ["none"]:
    none. servers: the parameter server's rows too, for each S (p workers,
    `workers_per_nic` on one NIC, chunks of chunk_bytes = ps.chunk_bytes)."""
    cmd = [runner.psar_binary(psar), "cost", "--format", "json",
           "--p", ",".join(str(p) for p in ranks), "--n", ",".join(str(n) for n in sizes),
           "--alpha", repr(float(alpha)), "--beta", repr(float(beta)),
           "--gamma", repr(float(gamma))]
    if algos:
        cmd += ["--algos", ",".join(algos)]
    if segment_bytes is not None:
        cmd += ["--set", f"sync.segment_bytes={segment_bytes}"]
    if servers:
        cmd += ["--servers", ",".join(str(s) for s in servers),
                "--workers-per-nic", str(workers_per_nic)]
    if chunk_bytes is not None:
        cmd += ["--set", f"ps.chunk_bytes={chunk_bytes}"]
    done = runner.launch(cmd, echo=False)
    if done.returncode != 0:
        raise runner.RunError(f"psar cost failed ({done.returncode}): {done.stderr.strip()}")
    out = json.loads(done.stdout)
    return CostTable(out["rows"], out["alpha"], out["beta"], out["gamma"])


# ---- the parameter server (not an allreduce: no registry entry) ------------

def ps_time(N, S, n, bandwidth, alpha, chunk, workers_per_node=1, psar=None):
    """α-β time of one push + pull of n bytes by N workers over S shards, each
    NIC at `bandwidth` bytes/s, in chunks of `chunk` bytes (ps.chunk_bytes),
    K = workers_per_node workers on one NIC: psar cost's form (ps/cost.h)."""
    return query([N], [int(n)], algos=["none"], alpha=alpha, beta=1 / bandwidth, psar=psar,
                 servers=[S], workers_per_nic=workers_per_node,
                 chunk_bytes=int(chunk)).ps_time(N, S, int(n))


def ps_bytes_total(N, n):
    """Payload bytes of one push + pull: each worker pushes n and pulls n."""
    return 2 * N * n


def ps_shard_bytes(N, S, n):
    """Bytes in + out of one of S shards per push + pull."""
    return 2 * N * n / S


# ---- fitting α and β to measured times --------------------------------------

def fit_alpha_beta(samples, gamma):
    """α, β ≥ 0 minimizing Σ((aα + bβ + cγ − t)/t)² over samples (a, b, c, t):
    relative error, since times span decades; γ held fixed."""
    best = None
    for use in ((True, True), (True, False), (False, True)):
        cols = [i for i, u in enumerate(use) if u]
        A = [[(s[i] / s[3]) for i in cols] for s in samples]
        y = [1 - s[2] * gamma / s[3] for s in samples]
        x = _least_squares(A, y)
        if x is None or any(v < 0 for v in x):
            continue
        full = [0.0, 0.0]
        for i, v in zip(cols, x):
            full[i] = v
        err = sum((r - sum(ai * xi for ai, xi in zip(row, x))) ** 2 for row, r in zip(A, y))
        if best is None or err < best[0]:
            best = (err, full)
    return best[1] if best else [0.0, 0.0]


def _least_squares(A, y):
    """Normal equations for 1 or 2 unknowns (enough here; no numpy needed)."""
    k = len(A[0])
    G = [[sum(r[i] * r[j] for r in A) for j in range(k)] for i in range(k)]
    h = [sum(r[i] * v for r, v in zip(A, y)) for i in range(k)]
    if k == 1:
        return [h[0] / G[0][0]] if G[0][0] > 0 else None
    det = G[0][0] * G[1][1] - G[0][1] * G[1][0]
    if abs(det) < 1e-300:
        return None
    return [(h[0] * G[1][1] - h[1] * G[0][1]) / det, (G[0][0] * h[1] - G[1][0] * h[0]) / det]
