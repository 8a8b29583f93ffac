"""The baseline of bench/report.py: what a person does today with a PyTorch memory
snapshot in plain Python, the way torch/cuda/_memory_viz.py does it. Load the pickle,
walk each device's trace entries keeping the live blocks and the segments, note the
peak of allocated bytes, then sum the blocks per segment for each segment's
fragmentation. Prints one JSON line: the peak per device and the totals over segments,
so bench/report.py can check both tools found the same.

  python3 bench/memviz_replay.py SNAPSHOT.pickle
"""
import json
import pickle
import sys


def replay(snapshot):
    result = {}
    for device, trace in enumerate(snapshot["device_traces"]):
        blocks = {}    # address -> size
        segments = {}  # address -> total size
        allocated = peak = 0
        for entry in trace:
            action = entry["action"]
            if action == "alloc":
                blocks[entry["addr"]] = entry["size"]
                allocated += entry["size"]
                if allocated > peak:
                    peak = allocated
            elif action == "free_completed":
                allocated -= blocks.pop(entry["addr"], 0)
            elif action == "segment_alloc":
                segments[entry["addr"]] = entry["size"]
            elif action == "segment_free":
                segments.pop(entry["addr"], None)
        # per segment: the blocks inside it, the free space between them
        starts = sorted(segments)
        used = dict.fromkeys(starts, 0)
        for addr, size in blocks.items():
            lo, hi = 0, len(starts)
            while lo < hi:
                mid = (lo + hi) // 2
                if starts[mid] <= addr:
                    lo = mid + 1
                else:
                    hi = mid
            if lo and addr < starts[lo - 1] + segments[starts[lo - 1]]:
                used[starts[lo - 1]] += size
        reserved = sum(segments.values())
        result[device] = {"peak_allocated_bytes": peak, "segments": len(segments), "reserved_bytes": reserved,
                          "free_in_segments_bytes": reserved - sum(used.values())}
    return result


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)
    print(json.dumps(replay(snap)))
