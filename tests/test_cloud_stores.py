"""Azure Blob Storage (``abfs://`` / ``az://``, through adlfs) and Google Cloud Storage (``gs://``,
through gcsfs) as inputs and outputs, against real emulators on loopback: Azurite and
fake-gcs-server (tests/_emulators.py), reached by this process and by the workers of the shared
cluster through the standard chains (``AZURE_STORAGE_CONNECTION_STRING``, ``STORAGE_EMULATOR_HOST``).
Lakes and single objects in and out, reports, two writers (each store's conditional write), bad
URLs refused in one line with nothing written, credentials never written anywhere.  Each test runs
once per store and skips, saying why, where that store's emulator or extra is missing."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass

import pandas as pd
import pytest

import _emulators as emu
from _s3 import frame, run_cli, set_env, tree_text   # the data and the CLI call of the S3 tests
from daskmicro import anonymize_file
from daskmicro import cli as lake_cli
from daskmicro.errors import InputError, ParameterError
from daskmicro.privacy import verify_k_anonymity

# google-auth reads these once, when it is imported: set before anything imports it, in this
# process and (inherited) in the cluster's workers, so that no test looks for a metadata server.
set_env(emu.GOOGLE_ISOLATION)

BUCKET = "survey-data"
#: A storage option that must appear in nothing a run writes or says (a GCS project name here).
OPT_SECRET = "dm-option-secret-9d8c7b6a5f4e"


@dataclass
class Cloud:
    """One store under test: its scheme, its emulator, a file system of it for the test's own use,
    the storage options an API call may give, and the secrets nothing may show."""

    scheme: str
    place: str
    fs: object
    options: dict
    secrets: tuple

    def url(self, key: str = "") -> str:
        return f"{self.scheme}://{BUCKET}/{key}".rstrip("/")


def _started(request, client, start, env_of):
    server = start()
    env = env_of(server)
    old = set_env(env)
    olds = client.run(set_env, env)

    def stop():
        for worker, previous in olds.items():
            client.run(set_env, previous, workers=[worker])
        set_env(old)
        server.stop()

    request.addfinalizer(stop)
    return server


@pytest.fixture(scope="session")
def azurite(request, client):
    reason = emu.missing_azurite()
    if reason:
        pytest.skip(reason)
    server = _started(request, client, emu.start_azurite, lambda s: s.env)
    import adlfs

    fs = adlfs.AzureBlobFileSystem(connection_string=server.env["AZURE_STORAGE_CONNECTION_STRING"],
                                   skip_instance_cache=True)
    fs.mkdir(BUCKET)
    return Cloud("abfs", "container", fs, {"connection_string": server.env["AZURE_STORAGE_CONNECTION_STRING"]},
                 (emu.AZURE_KEY,))


@pytest.fixture(scope="session")
def fake_gcs(request, client):
    reason = emu.missing_fake_gcs()
    if reason:
        pytest.skip(reason)
    server = _started(request, client, emu.start_fake_gcs, lambda s: s.env)
    from gcsfs.core import GCSFileSystem

    fs = GCSFileSystem(endpoint_url=server.endpoint, token="anon", project="dm", skip_instance_cache=True)
    fs.mkdir(BUCKET)
    return Cloud("gs", "bucket", fs, {"endpoint_url": server.endpoint, "token": "anon", "project": OPT_SECRET},
                 (OPT_SECRET,))


@pytest.fixture(params=["azure", "gcs"])
def cloud(request):
    return request.getfixturevalue({"azure": "azurite", "gcs": "fake_gcs"}[request.param])


# --------------------------------------------------------------------------- helpers


def put(cloud, key: str, df: pd.DataFrame, fmt: str = "parquet") -> str:
    data = df.to_parquet(index=False) if fmt == "parquet" else df.to_csv(index=False).encode()
    cloud.fs.pipe_file(f"{BUCKET}/{key}", data)
    cloud.fs.invalidate_cache()
    return cloud.url(key)


def put_lake(cloud, prefix: str, df: pd.DataFrame) -> str:
    for (year, s), g in df.groupby(["year", "s"]):
        put(cloud, f"{prefix}/year={year}/s={s}/part-0.parquet", g.drop(columns=["year", "s"]))
    return cloud.url(prefix)


def keys(cloud, prefix: str = "") -> list:
    cloud.fs.invalidate_cache()
    try:
        return sorted(cloud.fs.find(f"{BUCKET}/{prefix}".rstrip("/")))
    except FileNotFoundError:
        return []


def read_object(cloud, key: str) -> pd.DataFrame:
    import pyarrow.parquet as pq

    cloud.fs.invalidate_cache()
    return pq.read_table(f"{BUCKET}/{key}", filesystem=cloud.fs).to_pandas()


def release_on_store(cloud, prefix: str):
    """(manifest, the release read back from the objects its manifest lists, hive columns joined,
    every key under the target)."""
    cloud.fs.invalidate_cache()
    manifest = json.loads(cloud.fs.cat_file(f"{BUCKET}/{prefix}/_SUCCESS"))
    frames = []
    for entry in manifest["files"]:
        df = read_object(cloud, f"{prefix}/{manifest['run']}/{entry['path']}")
        for seg in entry["path"].split("/")[:-1]:
            col, value = seg.split("=", 1)
            df[col] = value
        frames.append(df)
    return manifest, pd.concat(frames, ignore_index=True), keys(cloud, prefix)


def runs(found, prefix):
    return sorted({k[len(f"{BUCKET}/{prefix}/"):].split("/")[0] for k in found} - {"_SUCCESS"})


def no_secrets(cloud, *texts):
    for text in texts:
        for secret in cloud.secrets:
            assert secret not in text


def store_text(cloud, prefix):
    return "".join(cloud.fs.cat_file(k).decode("latin-1") for k in keys(cloud, prefix))


# --------------------------------------------------------------------------- inputs


def test_lake_and_single_objects_in(cloud, client, tmp_path, capsys):
    """A hive lake on the store → a local directory release (filter and projection pushed down,
    k-anonymous as published, a no-op re-run); one Parquet and one CSV object read with
    credentials given as storage_options → local release files; no credential written anywhere."""
    df = frame()
    url = put_lake(cloud, "lake", df)
    out = tmp_path / "rel"
    argv = [url, out, "--qi", "x,y", "--k", "3", "--filter", "year>=2019 and s in (a,b)", "--drop", "id",
            "--seed", "3"]
    capsys.readouterr()
    assert run_cli(argv, client) == (0, "")
    captured = capsys.readouterr()
    keep = df[(df.year >= 2019) & df.s.isin(["a", "b"])]
    parts = sorted({str(p.parent.relative_to(out)) for p in out.rglob("*.parquet")})
    assert parts == sorted(f"year={y}/s={s}" for y in (2019, 2020, 2021) for s in "ab")
    rel = pd.read_parquet(out)
    assert len(rel) == len(keep) and "id" not in rel.columns
    assert verify_k_anonymity(rel.assign(year=rel.year.astype(int), s=rel.s.astype(str)), ["year", "s", "x", "y"], 3)
    assert json.loads((out / "_SUCCESS").read_text())["rows"] == {"in": len(keep), "out": len(keep)}
    no_secrets(cloud, captured.out, captured.err, tree_text(out))
    assert run_cli(argv, client) == (0, "") and "nothing to do" in capsys.readouterr().out
    single = frame(90, seed=1).drop(columns=["s"])
    for fmt in ("parquet", "csv"):
        src = put(cloud, f"single/table.{fmt}", single, fmt)
        dest = tmp_path / f"rel-{fmt}.parquet"
        report = anonymize_file(src, dest, ["x", "y"], 4, client=client, seed=1, drop=["id"],
                                storage_options=cloud.options)
        rel = pd.read_parquet(dest)
        assert report.n == len(rel) == len(single) and verify_k_anonymity(rel, ["x", "y"], 4)
        assert sorted(rel.year) == sorted(single.year)
        no_secrets(cloud, dest.with_suffix(".report.json").read_text(), json.dumps(report.to_dict(), default=str),
                   dest.read_bytes().decode("latin-1"))


# --------------------------------------------------------------------------- outputs


def test_directory_release_on_the_store_replaced_and_cleaned(cloud, client, tmp_path, monkeypatch, capsys):
    """A lake on the store → a directory release on the store, committed by _SUCCESS: k-anonymous on
    the values read back, rows kept, only the report copy written locally; a no-op re-run; refused
    without --overwrite; with it replaced, the old run prefix deleted; the page of the release."""
    monkeypatch.chdir(tmp_path)
    df = frame(seed=4)
    url = put_lake(cloud, "lake-out", df)
    target = cloud.url("rel-out")
    report = tmp_path / "local.json"
    argv = [url, target, "--qi", "x,y", "--k", "3", "--drop", "id", "--seed", "1", "--report", report]
    capsys.readouterr()
    assert run_cli(argv, client) == (0, "")
    captured = capsys.readouterr()
    assert f"release: {target}/" in captured.out
    manifest, rel, found = release_on_store(cloud, "rel-out")
    assert manifest["rows"] == {"in": len(df), "out": len(df)} and len(rel) == len(df)
    assert verify_k_anonymity(rel, ["year", "s", "x", "y"], 3) and "id" not in rel.columns
    run1 = manifest["run"]
    assert runs(found, "rel-out") == [run1]
    listed = {f"{BUCKET}/rel-out/{run1}/{e['path']}" for e in manifest["files"]}
    assert set(found) == listed | {f"{BUCKET}/rel-out/_SUCCESS", f"{BUCKET}/rel-out/{run1}/_report.json"}
    assert json.loads(report.read_text())["paths"]["output"] == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.json"]
    no_secrets(cloud, captured.out, captured.err, store_text(cloud, "rel-out"), report.read_text())
    assert run_cli(argv[:-2], client) == (0, "") and "nothing to do" in capsys.readouterr().out
    argv4 = [a if a != "3" else "4" for a in argv]
    code, err = run_cli(argv4, client)
    assert code == 2 and f"output already exists: {target}" in err
    assert run_cli(argv4 + ["--overwrite"], client) == (0, "")
    manifest2, rel2, found2 = release_on_store(cloud, "rel-out")
    assert manifest2["run"] != run1 and runs(found2, "rel-out") == [manifest2["run"]]
    assert len(rel2) == len(df) and verify_k_anonymity(rel2, ["year", "s", "x", "y"], 4)
    capsys.readouterr()
    assert lake_cli.main(["report", target]) == 0       # the page beside the release, on the store
    assert capsys.readouterr().out.strip() == f"report: {target}.report.html"
    assert "<svg" in cloud.fs.cat_file(f"{BUCKET}/rel-out.report.html").decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local.json"]


def test_single_file_release_and_reports_as_objects(cloud, client, tmp_path, capsys):
    """A single-file release and its report as objects (the CLI), replaced only with --overwrite; a
    report object of a local release (the API); a spec writing a release and its report there; the
    page of a report object; the objects read back k-anonymous; nothing else written."""
    from daskmicro.workflow import parse_spec
    from daskmicro.workflow.runner import execute_run

    src = tmp_path / "in.parquet"
    df = frame(150, seed=11).drop(columns=["s"])
    df.to_parquet(src, index=False)
    target = cloud.url("files/rel.parquet")
    argv = ["anonymize", str(src), target, "--qi", "x,y", "--k", "3", "--drop", "id", "--seed", "2"]
    assert lake_cli.main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert f"release: {target}" in out and cloud.url("files/rel.report.json") in out
    rel = read_object(cloud, "files/rel.parquet")
    assert len(rel) == 150 and verify_k_anonymity(rel, ["x", "y"], 3)
    doc = json.loads(cloud.fs.cat_file(f"{BUCKET}/files/rel.report.json"))
    assert doc["verification"]["k_anonymity"]["min_count"] >= 3 and doc["paths"]["output"] == target
    before = cloud.fs.cat_file(f"{BUCKET}/files/rel.parquet")
    assert lake_cli.main([*argv[:-2], "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"output already exists: {target} (use --overwrite" in err, err
    assert cloud.fs.cat_file(f"{BUCKET}/files/rel.parquet") == before
    assert lake_cli.main([*argv[:-4], "--k", "5", "--drop", "id", "--seed", "5", "--overwrite"]) == 0
    capsys.readouterr()
    assert verify_k_anonymity(read_object(cloud, "files/rel.parquet"), ["x", "y"], 5)
    assert json.loads(cloud.fs.cat_file(f"{BUCKET}/files/rel.report.json"))["k"] == 5
    assert [k.rsplit("/", 1)[1] for k in keys(cloud, "files")] == ["rel.parquet", "rel.report.json"]
    report = anonymize_file(src, tmp_path / "local.parquet", ["x", "y"], 3, drop=["id"],
                            report=cloud.url("reports/local.json"), storage_options=cloud.options)
    assert json.loads(cloud.fs.cat_file(f"{BUCKET}/reports/local.json"))["n"] == report.n == 150
    no_secrets(cloud, store_text(cloud, "reports"), store_text(cloud, "files"), out)
    spec = parse_spec({"name": "objects", "input": {"path": str(src), "drop": ["id"]}, "qi": ["x", "y"], "k": 3,
                       "output": {"path": cloud.url("reports/spec.parquet")},
                       "report": {"path": cloud.url("reports/spec-report.json")}}, base_dir=tmp_path)
    summary = execute_run(spec, client=client)
    assert summary["output"] == cloud.url("reports/spec.parquet")
    assert summary["report"] == cloud.url("reports/spec-report.json")
    assert verify_k_anonymity(read_object(cloud, "reports/spec.parquet"), ["x", "y"], 3)
    capsys.readouterr()
    assert lake_cli.main(["report", cloud.url("reports/spec-report.json")]) == 0
    assert capsys.readouterr().out.strip() == f"report: {cloud.url('reports/spec-report.html')}"
    assert "information loss" in cloud.fs.cat_file(f"{BUCKET}/reports/spec-report.html").decode()
    assert lake_cli.main(["report", cloud.url("reports/spec-report.json")]) == 2     # the page exists
    assert "page already exists" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet", "local.parquet"]


def test_page_of_a_private_run_record_never_goes_to_the_store(cloud, tmp_path, capsys, monkeypatch):
    """The page of a private run record's exact report (exact figures of the original data) is
    owner-only on this machine; an object has no such mode, so ``daskmicro report RECORD`` with
    ``--output`` on the store — beside the release, where its public page would go — is refused in one
    line naming the object, as is a record read from the store (its page would go beside it);
    nothing is written there.  A local --output still gets the page, owner-only."""
    import stat
    from pathlib import Path

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    src = tmp_path / "in.parquet"
    frame(150, seed=13).drop(columns=["s"]).to_parquet(src, index=False)
    target = cloud.url("private/rel.parquet")
    assert lake_cli.main(["anonymize", str(src), target, "--qi", "x,y", "--k", "3", "--drop", "id"]) == 0
    err = capsys.readouterr().err
    record = re.findall(r"private run record .*: (\S+)\s*$", err, re.M)[-1]
    cloud.fs.pipe_file(f"{BUCKET}/private/copied-record.json", Path(record).read_bytes())   # a record put there
    before = keys(cloud, "private")
    for argv, page in [([record, "--output", cloud.url("private/rel.report.html")], cloud.url("private/rel.report.html")),
                       ([cloud.url("private/copied-record.json")], cloud.url("private/copied-record.html"))]:
        assert lake_cli.main(["report", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "private run record" in err and page in err, err
    assert keys(cloud, "private") == before
    local = tmp_path / "exact.html"
    assert lake_cli.main(["report", record, "--output", str(local)]) == 0
    assert "private, not for publication" in local.read_text() and stat.S_IMODE(local.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- two writers


def test_two_writers_the_first_wins(cloud, client, tmp_path):
    """Another writer puts the object (or commits a release into the target) while the run works, its
    last step before the commit: the run fails in one line and the other's object is left as it
    is — onto a key that held nothing and over one being replaced: the store's own conditional
    write (Azure If-None-Match / If-Match on the blob upload, GCS ifGenerationMatch)."""
    from daskmicro.config import RunConfig
    from daskmicro.plan import RunPaths, run

    src = tmp_path / "in.parquet"
    frame(90, seed=13).drop(columns=["s"]).to_parquet(src, index=False)
    target = cloud.url("race-file/rel.parquet")
    for overwrite in (False, True):
        theirs = f"theirs {overwrite}".encode()
        cfg = RunConfig.build(qi=["x", "y"], k=3, drop=["id"], overwrite=overwrite)
        with pytest.raises(ParameterError) as err:
            run(cfg, paths=RunPaths(input=src, output=target), client=client,
                before_commit=lambda: cloud.fs.pipe_file(f"{BUCKET}/race-file/rel.parquet", theirs))
        assert str(err.value).startswith(f"output {target}: another run wrote it while this one ran")
        assert "\n" not in str(err.value)
        cloud.fs.invalidate_cache()
        assert cloud.fs.cat_file(f"{BUCKET}/race-file/rel.parquet") == theirs
        assert keys(cloud, "race-file") == [f"{BUCKET}/race-file/rel.parquet"]
    lake = cloud.url("race")

    def other(k, overwrite):
        def commit_first():
            run(RunConfig.build(qi=["x", "y"], k=k, drop=["id"], overwrite=overwrite),
                paths=RunPaths(input=src, output=lake), client=client)
        return commit_first

    for first_k, (k, overwrite) in enumerate([(3, False), (5, True)], start=4):
        cfg = RunConfig.build(qi=["x", "y"], k=first_k, drop=["id"], overwrite=overwrite)
        with pytest.raises(ParameterError) as err:
            run(cfg, paths=RunPaths(input=src, output=lake), client=client, before_commit=other(k, overwrite))
        assert str(err.value).startswith(f"output {lake}: another run committed a release there while this one ran")
        manifest, rel, found = release_on_store(cloud, "race")
        assert manifest["configuration"]["k"] == k and runs(found, "race") == [manifest["run"]]
        assert len(rel) == 90 and verify_k_anonymity(rel, ["x", "y"], k)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


# --------------------------------------------------------------------------- incremental surveys


def test_incremental_survey_on_the_store(cloud, client, tmp_path, monkeypatch):
    """A survey landing on the store as a collector lands it (its manifest, then one object per
    file; the last only once the base stage is submitted) → a directory release and its report on
    the store: the increment is the late object, every record published once, k-anonymous as read
    back, no arrival object named and no secret in anything written."""
    from _store_survey import K, N, N_BASE, NU, QI, StoreSurvey, land_after_the_base, survey_frame
    from daskmicro import anonymize_incremental
    from daskmicro.graph.incremental import default_kernel, warm_up

    warm_up(client, "2mdav", default_kernel)   # the stages' kernels loaded before the survey opens
    monkeypatch.chdir(tmp_path)
    df = survey_frame(5)
    survey = StoreSurvey(cloud.fs, "surveys/api", df, bucket=BUCKET, scheme=cloud.scheme).start()
    land_after_the_base(client, survey)
    try:
        release, report = anonymize_incremental(
            survey.url, QI, K, nu=NU, keep=["record_id"], seed=2, timeout=120, client=client,
            output=cloud.url("releases/survey"), report=cloud.url("reports/survey.json"),
            storage_options=cloud.options)
    finally:
        survey.join()
    assert release is None
    assert (report.incremental["n_base"], report.incremental["n_increment"]) == (N_BASE, N - N_BASE)
    manifest, rel, found = release_on_store(cloud, "releases/survey")
    assert manifest["rows"] == {"in": N, "out": N} and sorted(rel.record_id) == list(range(N))
    assert verify_k_anonymity(rel, QI, K) and sorted(rel.columns) == sorted(df.columns)
    assert json.loads(cloud.fs.cat_file(f"{BUCKET}/reports/survey.json"))["incremental"]["n_increment"] == N - N_BASE
    written = store_text(cloud, "releases/survey") + store_text(cloud, "reports")
    assert not any(name in written for name in survey.names)
    no_secrets(cloud, written)
    assert list(tmp_path.iterdir()) == []   # nothing written here


# --------------------------------------------------------------------------- bad URLs


def test_bad_urls_one_line_nothing_written(cloud, client, tmp_path, capsys):
    """A missing container or bucket (input, directory release, release object, report), a URL
    without one, a key that is not there: one line naming the URL, exit 2, nothing written here
    or on the store."""
    lake = put_lake(cloud, "lake-bad", frame(60))
    before = keys(cloud)
    s, place = cloud.scheme, cloud.place
    cases = [
        ([f"{s}://no-such-{place}-x/lake", tmp_path / "rel"], f"input not found: {s}://no-such-{place}-x/lake "
                                                               f"(no such {place}, object or prefix)"),
        ([cloud.url("no/such/key.parquet"), tmp_path / "rel"], f"input not found: {cloud.url('no/such/key.parquet')}"),
        ([f"{s}:///lake", tmp_path / "rel"], f"no {place} in {s}:///lake"),
        ([lake, f"{s}://no-such-{place}-y/out"], f"output: {place} not found: {s}://no-such-{place}-y/out"),
        ([lake, f"{s}://no-such-{place}-y/o.parquet"], f"output: {place} not found: {s}://no-such-{place}-y/o.parquet"),
        ([lake, tmp_path / "o.parquet", "--report", f"{s}://no-such-{place}-y/r.json"],
         f"report: {place} not found: {s}://no-such-{place}-y/r.json"),
        ([lake, f"{s}://{BUCKET}.parquet"], f"output: {s}://{BUCKET}.parquet names a {place}, not an object"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        code = lake_cli.main(["anonymize", *map(str, argv), "--qi", "x,y", "--k", "3"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
        no_secrets(cloud, err)
        assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert keys(cloud) == before
    if cloud.scheme == "abfs":   # the container of an account: the URL's account must be the options'
        with pytest.raises(ParameterError, match="account_name names another account than the URL's"):
            anonymize_file(f"abfs://{BUCKET}@{emu.AZURE_ACCOUNT}.dfs.core.windows.net/lake-bad", tmp_path / "o",
                           ["x", "y"], 3, storage_options={"account_name": "someoneelse"})
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_azure_account_url(azurite, client, tmp_path):
    """``abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/KEY`` (ADLS Gen2's form) names the
    container of that account: read as the plain URL; messages name it as given."""
    url = put_lake(azurite, "acct-lake", frame(60, seed=3))
    host = f"{emu.AZURE_ACCOUNT}.dfs.core.windows.net"
    full = url.replace(f"abfs://{BUCKET}/", f"abfss://{BUCKET}@{host}/")
    out = tmp_path / "rel"
    report = anonymize_file(full, out, ["x", "y"], 3, client=client, drop=["id"])
    rel = pd.read_parquet(out)
    assert report.n == len(rel) == 60 and verify_k_anonymity(rel, ["x", "y"], 3)
    with pytest.raises(InputError) as err:
        anonymize_file(f"abfss://{BUCKET}@{host}/none", tmp_path / "o", ["x", "y"], 3, client=client)
    assert str(err.value) == f"input not found: abfss://{BUCKET}@{host}/none (no such container, object or prefix)"


# --------------------------------------------------------------------------- without a store


@pytest.mark.parametrize("scheme, module, extra", [("abfs", "adlfs", "azure"), ("az", "adlfs", "azure"),
                                                   ("gs", "gcsfs", "gcs")])
def test_missing_extra_is_one_line(scheme, module, extra, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, module, None)   # as if the extra were not installed
    code = lake_cli.main(["anonymize", f"{scheme}://{BUCKET}/lake", str(tmp_path / "rel"), "--qi", "x,y", "--k", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"daskmicro: error: reading {scheme}://… needs the {extra} extra: "
                                 f"pip install 'daskmicro[{extra}]'\n")
    assert list(tmp_path.iterdir()) == []


def test_secrets_of_connection_strings_are_scrubbed(monkeypatch):
    """Every message of another library goes through Store.scrub: the values of the options and of
    the credential variables of each store, and the key and signature inside a connection string
    or a SAS token, are replaced."""
    from daskmicro.io.objectstore import Store

    key, sig = "QUJDREVGR0hJSktMTU5PUA==", "c2lnbmF0dXJlLXZhbHVl"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", f"AccountName=a;AccountKey={key};BlobEndpoint=http://h")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/dm-service-account.json")
    store = Store("abfs", {"sas_token": f"sv=2024-01-01&sp=r&sig={sig}", "account_name": "acct"})
    text = store.scrub(f"denied: key {key} sig={sig} file /keys/dm-service-account.json")
    assert key not in text and sig not in text and "dm-service-account" not in text
    assert re.fullmatch(r"denied: key … sig=… file …", text), text
    assert "withheld" in repr(store) and sig not in repr(store)


def test_spec_refuses_credentials_of_every_store(tmp_path):
    from daskmicro.workflow import parse_spec

    for url, name in [("abfs://c/lake", "connection_string"), ("abfs://c/lake", "sas_token"),
                      ("abfs://c/lake", "account_key"), ("gs://b/lake", "token")]:
        with pytest.raises(ParameterError, match=rf"input\.storage_options\.{name}: credentials are never written"):
            parse_spec({"name": "s", "input": {"path": url, "storage_options": {name: "x"}}, "qi": ["x"], "k": 3,
                        "output": {"path": "o"}}, base_dir=tmp_path)
    spec = parse_spec({"name": "s", "input": {"path": "gs://b/lake", "storage_options": {"project": "p"}},
                       "qi": ["x"], "k": 3, "output": {"path": "o"}}, base_dir=tmp_path)
    assert spec.data["input"]["storage_options"] == {"project": "p"}
