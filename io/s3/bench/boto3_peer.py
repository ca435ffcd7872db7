#!/usr/bin/python3
"""boto3 side of the io/s3 benchmark: PUT or GET n objects of one size at
concurrency c, the way a boto3 user does it (one shared client, a thread
pool of c workers, max_pool_connections = c, retries off like prism's).

Endpoint and credentials come from the AWS environment the Go driver sets
(AWS_ENDPOINT_URL is read here explicitly: Debian's botocore 1.29 predates
its support). Prints one JSON line: ops, wall_seconds, p50_ns, p99_ns,
cpu_seconds (this process, timed part only).
"""
import concurrent.futures
import io
import json
import os
import sys
import time

import boto3
import botocore.config


def transfer(op, bucket, key, size, conc, part):
    """A checkpoint-sized object through boto3's managed transfers, as a
    training script saving to S3 does: upload_fileobj (multipart in
    part-sized chunks, conc threads) and download_fileobj (ranged GETs of
    part size, conc threads). Prints wall seconds and bytes."""
    import boto3.s3.transfer
    cfg = botocore.config.Config(
        max_pool_connections=conc,
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], config=cfg)
    tc = boto3.s3.transfer.TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=conc, use_threads=True)
    if op == "usave":
        body = io.BytesIO(os.urandom(size))
        cpu0, t0 = time.process_time(), time.perf_counter()
        s3.upload_fileobj(body, bucket, key, Config=tc)
    else:
        sink = io.BytesIO()
        cpu0, t0 = time.process_time(), time.perf_counter()
        s3.download_fileobj(bucket, key, sink, Config=tc)
        got = sink.getbuffer().nbytes  # parts land out of order: tell() is the last one's end
        if got != size:
            raise RuntimeError("%s: got %d bytes, want %d" % (key, got, size))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(json.dumps({"ops": 1, "wall_seconds": wall, "p50_ns": 0, "p99_ns": 0, "cpu_seconds": cpu}))


def main():
    op = sys.argv[1]
    if op in ("usave", "uload"):
        transfer(op, sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
        return
    op, bucket, prefix, size, n, conc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    cfg = botocore.config.Config(
        max_pool_connections=conc,
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], config=cfg)
    body = os.urandom(size)
    keys = ["%s/%d" % (prefix, i) for i in range(n)]

    def put(k):
        t = time.perf_counter_ns()
        s3.put_object(Bucket=bucket, Key=k, Body=body)
        return time.perf_counter_ns() - t

    def get(k):
        t = time.perf_counter_ns()
        data = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
        dt = time.perf_counter_ns() - t
        if len(data) != size:
            raise RuntimeError("%s: got %d bytes, want %d" % (k, len(data), size))
        return dt

    fn = put if op == "put" else get
    with concurrent.futures.ThreadPoolExecutor(max_workers=conc) as pool:
        # Untimed warm-up: one request per worker opens the pool's connections.
        warm = ["%s/warm-%d" % (prefix, i) for i in range(conc)]
        list(pool.map(put, warm))
        if op == "get":
            list(pool.map(get, warm))
        cpu0, t0 = time.process_time(), time.perf_counter()
        lat = list(pool.map(fn, keys))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    lat.sort()
    print(json.dumps({
        "ops": len(lat),
        "wall_seconds": wall,
        "p50_ns": lat[len(lat) // 2],
        "p99_ns": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "cpu_seconds": cpu,
    }))


if __name__ == "__main__":
    main()
