"""The first CUDA bundle sealed on an accelerator, and the ngram profile run beside it.

`tests/evidence/cuda-h100-bundle/` holds what `bench/gpu/device.sh build` and `ngram` brought
back from one NVIDIA H100 80GB HBM3 (PCI 10de:2330, driver 580.159.04) at 1ff031b with
manifests/tiny-cuda.toml: `tiny-cuda.tar` (`repro pack` of the sealed bundle), its build's and
its verify's output there (`build.log`, `verify-there.log`: PASS, 33 claims), and the run
directory of `repro run --profile ngram` against its teacher (`ngram-run/`, `ngram.log`).

It is evidence, not a committed record (repro/): here its tools claim does not hold. That claim
follows what each pinned distribution requires as the verifier's own installed copy states it,
and the accelerator host's tools pinned python-dateutil 2.9.0.post0 (which requires six) where
this tree's verifier has 4.0.0 (which does not): "six is pinned but required by nothing repro
needs". bench/gpu/tools-wheels.txt now pins the verifier's versions; the record is to be built
again with them.
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest
from bundle_assets import example_trust
from hosts import h200_host

from repro_serving.builder.documents.evidence import Verdict
from repro_serving.builder.documents.host import compare
from repro_serving.builder.documents.manifest import Manifest, SpecDecodeGate
from repro_serving.builder.drift import DriftKind
from repro_serving.builder.verify import verify
from repro_serving.launch.gates import spec_decode
from repro_serving.launch.metrics import delta

EVIDENCE = Path(__file__).resolve().parent / "evidence" / "cuda-h100-bundle"
NGRAM = EVIDENCE / "ngram-run"
TOOLS_CLAIM = "tools/ = repro"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("cuda")
    with tarfile.open(EVIDENCE / "tiny-cuda.tar") as archive:
        archive.extractall(into, filter="data")
    return into / "tiny-cuda"


def test_every_claim_but_the_tools_holds_offline_on_a_cpu(bundle: Path) -> None:
    """The record's evidence (audits judged again, native roles, JIT files and environments
    of both starts, choices of code, gates, rows) recomputed here as on the H100."""
    report = verify(bundle, example_trust())
    assert report.findings == ()
    failed = [c for c in report.checks if not c.ok]
    assert [c.claim for c in failed if not c.claim.startswith(TOOLS_CLAIM)] == []
    assert len(report.checks) == 33


def test_the_sealed_evidence_names_the_gpu_and_cuda_graphs(bundle: Path) -> None:
    observations = json.loads((bundle / "evidence" / "observations.json").read_text())
    (gpu,) = observations["host"]["accelerators"]
    assert (gpu["vendor"], gpu["device"], gpu["driver_version"]) == ("10de", "2330", "580.159.04")
    for start in ("start-1", "start-2"):
        log = (bundle / "evidence" / start / "server.log").read_text()
        assert "Using FlashAttention version 3" in log
        assert "Capturing CUDA graphs (PIECEWISE)" in log and "Capturing CUDA graphs (FULL)" in log
    lock = json.loads((bundle / "lock.json").read_text())
    places = {f["place"] for f in lock["native"]["jit"]["engine_core"]}
    assert "{home}/.cache/vllm/torch_compile_cache/**" in places


def test_a_host_without_the_h100_is_refused_naming_it(bundle: Path) -> None:
    """An H200 (10de:2335) and a host with no accelerator: the manifest's own host check,
    which `verify --host` and `launch` apply before anything starts."""
    manifest = Manifest.from_path(bundle / "manifest.toml")
    h200 = h200_host()
    for host in (h200, dataclasses.replace(h200, accelerators=())):
        accelerator = [d for d in compare(manifest.host, host) if "accelerator" in d.subject]
        (drift,) = accelerator
        assert drift.kind is DriftKind.HOST and drift.subject == "accelerator 10de:2330"
        assert (drift.expected, drift.observed) == ("1 present", "none")


def test_the_ngram_run_proposed_drafts_accepted_none_and_kept_the_teachers_tokens() -> None:
    """Prompt lookup finds few n-grams in a random model's answers: 25 drafts of 74 tokens,
    none accepted, every row still the teacher's token ids (a verifier that rejects is not
    one that rubber-stamps); judged by the spec-decode gate: acceptance and the draft depth
    hold at 0, a survival curve cannot decay from zero."""
    verdicts = {v["gate"]: v["status"] for v in json.loads((NGRAM / "verdicts.json").read_text())}
    assert verdicts["exact_token_ids"] == verdicts["fresh_starts"] == "pass"
    for start in ("start-1", "start-2"):
        metrics = delta(
            (NGRAM / start / "metrics-before.prom").read_text(),
            (NGRAM / start / "metrics-after.prom").read_text(),
        )
        assert (metrics.spec_decode_drafts, metrics.spec_decode_draft_tokens) == (25.0, 74.0)
        assert metrics.spec_decode_accepted_per_position == (0.0, 0.0, 0.0)
        held: Verdict = spec_decode(
            SpecDecodeGate(acceptance_min=0.0, positions=3, survival_must_decay=False), metrics
        )
        assert held.passed, held.summary
        decaying = spec_decode(SpecDecodeGate(acceptance_min=0.0, positions=3), metrics)
        assert not decaying.passed
