"""The patched gofakes3 the long benchmarks stand on: its listings start at the prefix instead of
the bucket's first key, and must still answer exactly what S3 answers (every key under the prefix,
common prefixes once, pages that resume where they stopped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench import bench_module

ProxiedS3 = bench_module("harness.services").ProxiedS3

BUCKET = "listings"
KEYS = sorted(
    [
        "a/1",
        "t/_delta_log/00.json",
        "t/_delta_log/01.json",
        "t/_delta_log/02.json",
        "t/_delta_log/_last_checkpoint",
        "t/p=1/f1.parquet",
        "t/p=1/f2.parquet",
        "t/p=2/f3.parquet",
        "t/x.parquet",
        "t0/y.parquet",
        "tz",
        "u/_delta_log/00.json",
        "é/1",
    ]
)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    store = ProxiedS3(Path(tmp_path_factory.mktemp("s3")), BUCKET, "gofakes3")
    try:
        store.start()
        client = store.s3()
        for key in KEYS:
            client.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        client.delete_object(Bucket=BUCKET, Key="tz")
        yield client
    finally:
        store.stop()


def listed(s3: Any, **query: Any) -> tuple[list[str], list[str]]:
    keys: list[str] = []
    prefixes: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, **query):
        keys += [item["Key"] for item in page.get("Contents", [])]
        prefixes += [item["Prefix"] for item in page.get("CommonPrefixes", [])]
    return keys, prefixes


LIVE = [k for k in KEYS if k != "tz"]


@pytest.mark.parametrize("prefix", ["", "t", "t/", "t/_delta_log/", "t/p=", "t/_delta_log/02", "v", "é"])
@pytest.mark.parametrize("page_size", [1, 2, 1000])
def test_a_prefix_lists_exactly_its_keys_in_order(s3: Any, prefix: str, page_size: int) -> None:
    keys, prefixes = listed(s3, Prefix=prefix, PaginationConfig={"PageSize": page_size})
    assert keys == [k for k in LIVE if k.startswith(prefix)]
    assert prefixes == []


@pytest.mark.parametrize(
    ("prefix", "keys", "prefixes"),
    [
        ("", [], ["a/", "t/", "t0/", "u/", "é/"]),
        ("t/", ["t/x.parquet"], ["t/_delta_log/", "t/p=1/", "t/p=2/"]),
        ("t/p=", [], ["t/p=1/", "t/p=2/"]),
        ("t/_delta_log/", [k for k in LIVE if k.startswith("t/_delta_log/")], []),
    ],
)
def test_a_delimiter_gives_each_common_prefix_once(
    s3: Any, prefix: str, keys: list[str], prefixes: list[str]
) -> None:
    assert listed(s3, Prefix=prefix, Delimiter="/") == (keys, prefixes)


@pytest.mark.parametrize(
    ("start_after", "expected"),
    [
        (
            "t/_delta_log/00.json",
            ["t/_delta_log/01.json", "t/_delta_log/02.json", "t/_delta_log/_last_checkpoint"],
        ),
        ("a", [k for k in LIVE if k.startswith("t/_delta_log/")]),
        ("t/_delta_log/_last_checkpoint", []),
        ("z", []),
    ],
)
def test_a_listing_resumes_after_its_marker(s3: Any, start_after: str, expected: list[str]) -> None:
    keys, _ = listed(s3, Prefix="t/_delta_log/", StartAfter=start_after)
    assert keys == expected
