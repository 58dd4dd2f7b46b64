"""Benchmark of a site's artifact repository as an S3 endpoint (sandbox/s3/): PutObject and
GetObject of one 256 MiB object with botocore's client through the listener, beside the floor
of copying the same file on the same disk, in one run.

Run: .venv/bin/python tests/bench/bench_s3.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import botocore.session
from botocore.config import Config

from sandbox.artifacts import Repository
from sandbox.s3.listener import Endpoint

MIB = 256
HOST = "s3.site-a.sandbox.invalid"
BUCKET = "site-a-artifacts"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-s3-", dir="/var/tmp"))
    ep = Endpoint(
        site="site-a",
        endpoint=HOST,
        region="eu-west",
        store=Repository(bucket=BUCKET, endpoint=HOST, root=root / "buckets" / BUCKET),
        secret_of=lambda ak: "sk" if ak == "ak" else None,
        new_bucket=lambda name: None,
        spool=root / "spool",
    )
    ep.start()
    try:
        src = root / "src.bin"
        with src.open("wb") as f:
            for _ in range(MIB):
                f.write(os.urandom(1 << 20))
        t = time.perf_counter()
        shutil.copyfile(src, root / "copy.bin")
        floor = time.perf_counter() - t
        s3 = botocore.session.get_session().create_client(
            "s3",
            region_name="eu-west",
            endpoint_url=f"http://{HOST}",
            aws_access_key_id="ak",
            aws_secret_access_key="sk",
            config=Config(proxies={"http": ep.url}, s3={"addressing_style": "path"}),
        )
        t = time.perf_counter()
        with src.open("rb") as f:
            s3.put_object(Bucket=BUCKET, Key="big.bin", Body=f)
        put = time.perf_counter() - t
        t = time.perf_counter()
        body = s3.get_object(Bucket=BUCKET, Key="big.bin")["Body"]
        size = 0
        while chunk := body.read(1 << 20):
            size += len(chunk)
        get = time.perf_counter() - t
        assert size == MIB << 20
        print(f"{MIB} MiB: floor (local file copy) {floor:.2f} s")
        print(f"  PutObject (signed payload, botocore) {put:.2f} s ({MIB / put:.0f} MiB/s)")
        print(f"  GetObject (botocore)                 {get:.2f} s ({MIB / get:.0f} MiB/s)")
    finally:
        ep.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
