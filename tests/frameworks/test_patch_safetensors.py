"""``tensorfile.patch_safetensors()``: code that imports ``safetensors`` itself
(``transformers``, ``huggingface_hub``) gets tensorfile's drop-in without an edit (issue 25).
Each case runs in a fresh interpreter, so the patch and what it imported stay there
(transformers' two cases, one file and shards, share one)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorfile
from tests.helpers.paths import is_inside, package_folder


def run(code: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_imports_resolve_to_the_drop_in_and_back(tmp_path: Path) -> None:
    out = run(
        """
        import sys, warnings
        import numpy as np
        import tensorfile
        tensorfile.patch_safetensors()
        tensorfile.patch_safetensors()  # twice: harmless
        import safetensors, safetensors.torch, safetensors.numpy
        from safetensors import safe_open
        assert safetensors.__name__ == "tensorfile.safetensors", safetensors.__name__
        assert safetensors.torch.__name__ == "tensorfile.safetensors.torch"
        assert safe_open is tensorfile.safetensors.safe_open
        try:
            import safetensors._safetensors_rust
        except ImportError as exc:
            print("rust:", type(exc).__name__, "patched" in str(exc))
        p = sys.argv[1] + "/m.safetensors"
        safetensors.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, p)
        tensorfile.unpatch_safetensors()
        import safetensors.numpy as ref
        assert ref.__name__ == "safetensors.numpy", ref.__name__
        print("ref file:", ref.__file__)
        print("ref reads:", ref.load_file(p)["w"].tolist())
        with tensorfile.patched_safetensors():
            import safetensors.numpy as again
            assert again.__name__ == "tensorfile.safetensors.numpy"
        import safetensors.numpy as back
        assert back is ref, "the reference's modules come back after the block"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            tensorfile.patch_safetensors()  # the reference is imported: a warning
        print("warned:", any("imported before" in str(w.message) for w in seen))
        """,
        tmp_path,
    )
    assert "rust: ModuleNotFoundError True" in out
    ref_file = out.split("ref file: ", 1)[1].splitlines()[0]
    # by folder, not by the word: a checkout named tensorfile holds the reference in its .venv
    assert not is_inside(ref_file, package_folder(tensorfile)), ref_file
    assert "ref reads: [0.0, 1.0, 2.0, 3.0]" in out
    assert "warned: True" in out


def test_the_reference_is_told_apart_by_folder_not_by_name(tmp_path: Path) -> None:
    """A clone named ``tensorfile`` with its venv inside: the reference's module there is
    not in the package, the package's own module is (issue 36: the test above searched the
    path for the word "tensorfile" and failed in such a checkout)."""
    clone = tmp_path / "tensorfile"
    package = clone / "src" / "tensorfile"
    ref = clone / ".venv" / "lib" / "python3.11" / "site-packages" / "safetensors" / "numpy.py"
    ours = package / "safetensors" / "numpy.py"
    for f in (ref, ours):
        f.parent.mkdir(parents=True)
        f.write_text("")
    (package / "__init__.py").write_text("")
    assert "tensorfile" in str(ref)  # what the old check looked at
    assert not is_inside(ref, package)
    assert is_inside(ours, package) and is_inside(package, package)
    assert not is_inside(clone / "src" / "tensorfile-extra" / "m.py", package)  # a prefix
    (tmp_path / "link").symlink_to(package)
    assert is_inside(tmp_path / "link" / "safetensors" / "numpy.py", package)


# transformers saves and loads a small BERT twice, in one file and in shards of 20 KB: both
# cases in one interpreter (importing torch and transformers takes it about 5 s of a core),
# saved and loaded while patched, then read by the reference once unpatched
_BERT = """
import os, sys
import tensorfile
tensorfile.patch_safetensors()
import torch
import transformers
from transformers import BertConfig, BertModel
import transformers.modeling_utils as mu
import safetensors.torch
assert safetensors.torch.__name__ == "tensorfile.safetensors.torch"
written = {}
for case, size in (("one file", "1GB"), ("shards", "20KB")):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=37)
    model = BertModel(cfg).eval()
    out = os.path.join(sys.argv[1], case.replace(" ", "-"))
    model.save_pretrained(out, max_shard_size=size)
    loaded = BertModel.from_pretrained(out).eval()
    want, got = model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)
    names = sorted(os.listdir(out))
    print(case, "files:", [n for n in names if n.endswith((".safetensors", ".json"))])
    written[case] = (out, names, len(want))
tensorfile.unpatch_safetensors()
import safetensors.torch as ref  # the reference reads what was written
for case, (out, names, count) in written.items():
    total = 0
    for n in names:
        if n.endswith(".safetensors"):
            total += len(ref.load_file(os.path.join(out, n)))
    print(case, "reference tensors:", total == count)
"""


@pytest.fixture(scope="session")
def bert_through_the_patch(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """What :data:`_BERT` printed, run once per run (whichever worker asks first)."""
    pytest.importorskip("transformers")
    from tests.helpers.workers import once_per_run, run_folder

    def make(folder: Path) -> None:
        (folder / "printed.txt").write_text(run(_BERT, folder), encoding="utf-8")

    made = once_per_run(run_folder(tmp_path_factory), "bert-through-the-patch", make)
    return (made / "printed.txt").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("shards", [False, True])
def test_transformers_loads_through_the_patched_safetensors(
    bert_through_the_patch: list[str], shards: bool
) -> None:
    """A small BERT built from a config (no download) saved and loaded by transformers
    itself, with ``safetensors`` patched: transformers' own modules use tensorfile's
    functions, the files load in the reference unchanged, and the weights come back equal."""
    case = "shards" if shards else "one file"
    out = "\n".join(line for line in bert_through_the_patch if line.startswith(case + " "))
    assert f"{case} reference tensors: True" in out
    if shards:
        assert "model.safetensors.index.json" in out
        assert "model-00001-of-" in out  # (written in more than one shard)
    else:
        assert "model.safetensors'" in out


def test_huggingface_hub_loads_through_the_patched_safetensors(tmp_path: Path) -> None:
    out = run(
        """
        import sys
        import tensorfile
        tensorfile.patch_safetensors()
        import torch
        from huggingface_hub import load_torch_model, save_torch_model
        import os
        os.makedirs(sys.argv[1] + "/m")
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        save_torch_model(model, sys.argv[1] + "/m", max_shard_size="1KB")
        other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        load_torch_model(other, sys.argv[1] + "/m")
        a, b = model.state_dict(), other.state_dict()
        print("equal:", all(torch.equal(a[k], b[k]) for k in a))
        import safetensors.torch
        print("patched:", safetensors.torch.__name__)
        """,
        tmp_path,
    )
    assert "equal: True" in out
    assert "patched: tensorfile.safetensors.torch" in out
