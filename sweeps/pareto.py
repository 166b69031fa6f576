"""Pareto front and crowding-distance thinning (NSGA-II's), for the multi-objective confirm stage."""
from __future__ import annotations


def pareto_front(points: list[list[float]]) -> list[int]:
    """Indices of the non-dominated points (every objective maximised)."""
    def dominates(a, b):
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def crowding_distance(points: list[list[float]]) -> list[float]:
    n = len(points)
    dist = [0.0] * n
    if n <= 2:
        return [float("inf")] * n
    for m in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][m])
        lo, hi = points[order[0]][m], points[order[-1]][m]
        dist[order[0]] = dist[order[-1]] = float("inf")
        if hi == lo:
            continue
        for a, i, b in zip(order, order[1:], order[2:]):
            dist[i] += (points[b][m] - points[a][m]) / (hi - lo)
    return dist


def crowding_thin(points: list[list[float]], k: int) -> list[int]:
    """Keep the k points of a front that spread it best: repeatedly drop the most crowded one."""
    keep = list(range(len(points)))
    while len(keep) > k:
        d = crowding_distance([points[i] for i in keep])
        keep.pop(min(range(len(keep)), key=lambda j: d[j]))
    return keep
