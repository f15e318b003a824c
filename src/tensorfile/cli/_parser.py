"""The command line's arguments: one parser per subcommand, each ``--help`` with examples,
the exit statuses, and what a path may be (a URL too).

Example:
    >>> args = build_parser().parse_args(["summary", "a.zt", "b.zt", "--json"])
    >>> args.path, args.json
    (['a.zt', 'b.zt'], True)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from .._version import __version__
from ..core.digests import ALGORITHMS
from ..ops.inspect import readable
from ._convert import TARGETS, run_convert
from ._dataset import run_dataset_from, run_dataset_gc
from ._diff import run_diff
from ._ident import run_id, run_summary
from ._inspect import run_inspect
from ._meta import run_meta
from ._output import Output
from ._samples import run_samples
from ._text import plural
from ._values import VALUE_LIMIT
from ._verify import run_verify

__all__ = ["Command", "UsageError", "build_parser"]

Command = Callable[[argparse.Namespace, Output], int]

PATH_HELP = (
    f"a file of a format tensorfile reads ({readable()}), a sharded checkpoint "
    "(*.safetensors.index.json or a folder holding one), a quoted glob (one checkpoint), or "
    "a URL; several paths (as a shell expands a glob): each file in turn"
)

PATHS = """\
Paths:
  A path is a local file, a sharded checkpoint (its *.safetensors.index.json, or the
  folder holding it), a quoted glob read as one checkpoint ('shards/*.safetensors'), or a
  URL: http(s)://... (only the header is fetched, with range requests), or any fsspec URL
  (s3://, gs://, hf://...; pip install tensorfile[remote]). Credentials in a URL are never
  printed."""


def _several(cmd: str, shown: str = "under a heading (==> path <==)") -> str:
    return f"""\
Several paths (tensorfile {cmd} *.zt, as a shell expands it): each file in turn,
  {shown}; --json prints a list of the one-file
  objects, in the order given. A file that cannot be read is reported on stderr and
  skipped; the others are still processed."""


STATUS = """\
Exit status:
  0  success
  2  bad usage, or a file could not be read or is not a valid tensor file (with several
     paths: after the others were processed)
  130  interrupted"""

DIFF_STATUS = """\
Exit status:
  0  success (the files may differ: see --fail-on-diff)
  1  the files differ, with --fail-on-diff
  2  bad usage, or a file could not be read or is not a valid tensor file
  130  interrupted"""

DESCRIPTION = """\
Inspect, identify, diff, edit, convert and verify tensor files. inspect, id, summary, diff
and meta read headers only; id --content, diff --data, convert and verify read tensor
data too, one tensor at a time (and any command reads a PyTorch pickle whole: it has to
be unpickled to be known)."""

TOP_STATUS = """\
Exit status:
  0  success
  1  the files differ (diff --fail-on-diff), or verification failed (verify)
  2  bad usage, or a file could not be read or is not a valid tensor file
  130  interrupted"""

CONVERT_STATUS = """\
Exit status:
  0  converted
  2  bad usage (an option the output format does not have), or the source could not be
     read or converted, its own digests failing included (nothing is left at DST)
  130  interrupted"""

VERIFY_STATUS = """\
Exit status:
  0  every rule holds
  1  something fails (a tensor no digest covers included, as above): the first failing
     tensor and its rule on stderr (--json: all)
  2  bad usage, or a file could not be read or is not a valid tensor file
  130  interrupted"""

EPILOGS = {
    "inspect": f"""\
Examples:
  tensorfile inspect model.safetensors
  tensorfile inspect ./llama-checkpoint --tree
  tensorfile inspect https://huggingface.co/org/model/resolve/main/model.safetensors
  tensorfile inspect *.gguf --json
  tensorfile inspect train.pth --key model_state_dict    # one dictionary of a checkpoint

{_several("inspect")}

{PATHS}

{STATUS}""",
    "id": f"""\
Examples:
  tensorfile id model.safetensors
  tensorfile id model.zt --content      # the same id for the same tensors in any format
  tensorfile id model.safetensors --content --verify       # also checks the digests the
                                        # file stores against the data
  tensorfile id my.safetensors --content --digest xxh3 --trust-stored-digests
                                        # a file you trust: its stored xxh3 digests
                                        # (checksum=xxh3) stand for the data, unread
  tensorfile id shards/*.safetensors    # one line per file: <hash>  <path>

The content id reads and hashes every tensor's bytes. --trust-stored-digests is a trust
boundary: the digests the file claims enter the id unchecked, so a file changed after it
was written keeps its old id. Use it only for files you trust; --verify checks them.
Only the default sha256 id resists a forger: an xxh3 or crc32c id (printed xxh3:<hex>,
crc32c:<hex>) detects accidental changes, and a file changed on purpose can keep it.

{_several("id", "one line each: <hash>  <path>")}

{PATHS}

{STATUS}""",
    "summary": f"""\
Examples:
  tensorfile summary model.gguf         # gguf,3,291,24,<hash>
  tensorfile summary *.safetensors      # one line per file: <path>,safetensors,...

{_several("summary", "one line each: <path>,<format>,...")}

{PATHS}

{STATUS}""",
    "diff": f"""\
Examples:
  tensorfile diff a.safetensors b.zt
  tensorfile diff a.safetensors b.safetensors --data --fail-on-diff
  tensorfile diff ./ckpt-v1 https://host/ckpt-v2/model.safetensors.index.json --format md

Metadata values are cut to {plural(VALUE_LIMIT, "character")} (with their full length);
--verbose shows them whole. --data shows a progress bar on a terminal.

{PATHS}

{DIFF_STATUS}""",
    "convert": f"""\
Examples:
  tensorfile convert model.safetensors model.zt                  # zTensor v1.0
  tensorfile convert model.safetensors model.zt --to zt2 --compression zstd --checksum xxh3
  tensorfile convert model.zt model.safetensors
  tensorfile convert ./checkpoint merged.safetensors            # a sharded checkpoint in
  tensorfile convert big.safetensors ./ck --shard-size 5GB       # shards + index, like hf
  tensorfile convert pytorch_model.bin model.safetensors         # never unpickled
  tensorfile convert train.pth model.safetensors --key model_state_dict   # the model only
  tensorfile convert model.gguf model.safetensors                # quantized: dequantized

Sources: safetensors (a file or a sharded checkpoint), zTensor v1.0/v2, GGUF, .npz, .npy,
PyTorch pickles (.pt, .pth, .bin; read by tensorfile's own reader, never unpickled and
never torch.load; entries that are not tensors, such as a training checkpoint's epoch, become
metadata, and --key picks one dictionary). The output format comes from --to or DST's
extension (.safetensors, .zt = v1.0, .npz). Tensor by tensor (memory: about the largest
tensor), atomic, the content id kept (tensorfile id --content). The digests the source
stores are checked as each tensor is read: a tensor they prove changed is an error, and
nothing is written. Sparse tensors to safetensors/npz need --densify.

{CONVERT_STATUS}""",
    "verify": f"""\
Examples:
  tensorfile verify model.zt                 # structure, every digest, every tensor's bytes
  tensorfile verify ./checkpoint --deep      # shards, total_size; NaN/Inf, BOOL bytes
  tensorfile verify shards/*.zt --json
  tensorfile verify model.safetensors --strict   # every tensor must have a digest

Rules: the format's structure (opening the file), each digest (zTensor crc32c, sha256,
xxh3; safetensors tensorfile.digests), each tensor's bytes present; for a sharded
checkpoint every shard present, every tensor in the shard the index names and nowhere
else, metadata.total_size. A file that stores digests must cover every tensor: those it
leaves out fail (uncovered: N tensors not covered by a digest: ...). A file with no
digests at all passes on structure alone, as its OK line says; --strict fails it too.
--deep reads every value: NaN and Inf in float tensors and BOOL bytes other than 0/1 fail.

{PATHS}

{VERIFY_STATUS}""",
    "meta": f"""\
Examples:
  tensorfile meta model.safetensors
  tensorfile meta model.safetensors --set license=MIT --delete note
  tensorfile meta shards/*.safetensors --set version=2   # each file, atomically

An edit writes a new file and renames it into place (each file atomically); the values
it echoes are cut to {plural(VALUE_LIMIT, "character")}. GGUF files and URLs are read-only.

{_several("meta")}

{PATHS}

{STATUS}""",
    "samples": """\
Examples:
  tensorfile samples examples        # then: cd examples, and run the documentation's examples
  python -m tensorfile.samples examples   # the same

Writes model.safetensors, model-v2.safetensors, model.zt, ckpt/ (a sharded checkpoint),
model.pt (a PyTorch pickle) and data/ (a dataset of 1,000 rows): the files the
documentation's examples read. Needs only the package (no torch). Each file is made in a
temporary folder and renamed into place; one already there with the same content is left
alone, one that differs is replaced only with --force (otherwise nothing is written).

Exit status:
  0  written (or already there)
  2  a sample already in DIR differs (without --force), or DIR cannot be written
  130  interrupted""",
    "dataset": """\
Commands on a dataset folder (tensorfile.dataset: dataset_manifest.json and its shards).

Examples:
  tensorfile dataset from-parquet train.parquet out/train --batch-size 1024
  tensorfile dataset from-hf hf/train out/train --batch-size 1024 --columns x,label
  tensorfile dataset gc out/train --dry-run
  tensorfile dataset gc s3://bucket/train --older-than 1d""",
    "dataset from": """\
Examples:
  tensorfile dataset from-parquet train.parquet out/train --batch-size 1024
  tensorfile dataset from-parquet parts/ s3://bucket/train --batch-size 512 --dtype BF16
  tensorfile dataset from-hf hf_saved/ out/train --split train --batch-size 1024 --columns x,y
  tensorfile dataset from-parquet kv.parquet out/kv --name-col key --json

Streams the rows into shards chunk by chunk (memory: a few --chunk-mb chunks, whatever the
input's size) and publishes them with one commit: a failure (a missing or corrupt input, a
null, a ragged row, a column that is no tensor: each named with its file, column and row)
leaves the dataset already at OUT as it was. Columns of numbers and bools, and lists of them
of one shape per column, become tensor columns; leave others out with --columns.

Exit status:
  0  written
  2  bad usage, or an input that cannot be converted (nothing published)
  130  interrupted""",
    "dataset gc": """\
Examples:
  tensorfile dataset gc out/train --dry-run     # what would go, and what is kept and why
  tensorfile dataset gc out/train               # remove leftovers unchanged for an hour
  tensorfile dataset gc s3://bucket/train --older-than 1d --json

Removes what killed writers left: shard files (part-*.safetensors) directly in the folder
that the manifest does not list, staging folders (_staging/<job>/) of jobs that wrote
nothing for DURATION, and (local folders) their temporary files. Each goes only once
unchanged for DURATION (default 1h): a running writer's shard,
moved into place but not yet published, is newer than that and is kept; the manifest is
read again right before each removal. Never touched: the manifest, the index, any listed
shard, other names, a folder under _staging that is no write job's as a writer leaves it
(kept, with why), symlinks (never followed), anything outside the folder. A folder
without a manifest keeps its shards (they are the dataset); one with no manifest, no
*.safetensors and no write job's staging is no dataset: refused. A writer that spends longer
than DURATION between moving a shard and publishing can lose it: keep DURATION above your
longest commit. A job quiet for DURATION loses its staging and fails at its commit,
publishing nothing: run it again.

Exit status:
  0  done (--dry-run: nothing removed)
  2  bad usage, or the dataset cannot be read (an unreadable manifest, or no dataset:
     nothing removed)
  130  interrupted""",
}


class UsageError(Exception):
    """A bad command line, as argparse describes it, with the usage of the (sub)command."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = " ".join(usage.split())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error becomes one line of tensorfile's (no usage block)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage())


def _check_id(args: argparse.Namespace) -> str | None:
    """What is wrong with ``id``'s options together: ``--digest``, ``--verify`` and
    ``--trust-stored-digests`` are options of ``--content``, and the last two exclude each
    other (one checks the stored digests against the data, the other takes them unread)."""
    trust = args.trust_stored_digests
    if args.verify and trust:
        return "--verify and --trust-stored-digests exclude each other: choose one"
    if args.content:
        return None
    options = (("--digest", args.digest), ("--verify", args.verify))
    given = [o for o, v in (*options, ("--trust-stored-digests", trust)) if v]
    if not given:
        return None
    return f"{' and '.join(given)} {'needs' if len(given) == 1 else 'need'} --content"


KEY_HELP = (
    "read only this dictionary of a PyTorch pickle, by its dotted name (a training "
    "checkpoint's model_state_dict): its tensors named from there on"
)


def _key(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", default=None, metavar="NAME", help=KEY_HELP)


def _dataset(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``tensorfile dataset COMMAND``: commands on a dataset folder (``gc``, ``from-*``)."""
    about = (
        "commands on a dataset folder: from-parquet, from-hf (write one from parquet or a "
        "Hugging Face dataset), gc (remove what killed writers left)"
    )
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "dataset", help=about, description=about, epilog=EPILOGS["dataset"], formatter_class=raw
    )
    p.set_defaults(parser=p)
    commands = p.add_subparsers(dest="dataset_command", required=True, metavar="COMMAND")
    about = "remove shards no manifest lists and dead writers' staging, safely while others write"
    g = commands.add_parser(
        "gc", help=about, description=about, epilog=EPILOGS["dataset gc"], formatter_class=raw
    )
    g.add_argument(
        "path", metavar="PATH", help="the dataset: a folder, or an fsspec URL (s3://...)"
    )
    g.add_argument(
        "--dry-run", action="store_true", help="remove nothing; print what would be removed"
    )
    g.add_argument(
        "--older-than",
        default=None,
        metavar="DURATION",
        help="remove only what has not changed for DURATION (90s, 30m, 1h, 2d; default: "
        "1h); 0 removes every leftover, a running writer's too",
    )
    g.add_argument("--json", action="store_true", help="print JSON on stdout, nothing else")
    g.set_defaults(run=run_dataset_gc, parser=g)
    _dataset_from(commands, "parquet", "parquet files (tensorfile.dataset.from_parquet)")
    _dataset_from(commands, "hf", "a Hugging Face dataset (tensorfile.dataset.from_hf)")


def _dataset_from(commands: argparse._SubParsersAction[_Parser], kind: str, what: str) -> None:
    """``tensorfile dataset from-parquet`` / ``from-hf``: write a dataset from ``what``."""
    about = f"write a dataset from {what}, streaming"
    raw = argparse.RawDescriptionHelpFormatter
    c = commands.add_parser(
        f"from-{kind}", help=about, description=about, epilog=EPILOGS["dataset from"],
        formatter_class=raw,
    )  # fmt: skip
    source = (
        "parquet files, or folders of *.parquet files"
        if kind == "parquet"
        else "a save_to_disk folder (of a Dataset or a DatasetDict), or its Arrow files"
    )
    c.add_argument("sources", nargs="+", metavar="SOURCE", help=source)
    c.add_argument("out", metavar="OUT", help="the dataset: a folder, or an fsspec URL (s3://...)")
    mode = c.add_mutually_exclusive_group(required=True)
    mode.add_argument("--batch-size", type=int, metavar="N", help="batch mode: N rows a shard")
    mode.add_argument("--name-col", metavar="COLUMN", help="key-value mode: the key column")
    c.add_argument("--columns", metavar="A,B", help="the columns to take (default: all)")
    c.add_argument("--dtype", metavar="DTYPE", help="store array columns as DTYPE (F16, BF16...)")
    c.add_argument("--shapes", metavar="JSON", help='sample shapes, as {"x": [64, 64]}')
    c.add_argument("--tail-strategy", choices=("write", "pad", "drop"), help="a short last batch")
    c.add_argument("--mode", choices=("overwrite", "append"), default="overwrite")
    c.add_argument("--chunk-mb", type=float, default=None, metavar="MB", help="rows held at a time")
    if kind == "hf":
        c.add_argument("--split", metavar="NAME", help="the split of a DatasetDict's folder")
    c.add_argument("--json", action="store_true", help="print JSON on stdout, nothing else")
    c.set_defaults(run=run_dataset_from, kind=kind, parser=c)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="tensorfile",
        description=DESCRIPTION,
        epilog=f"{PATHS}\n\n{TOP_STATUS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tensorfile {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str, run: Command, help: str, *, reads: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=help,
            epilog=EPILOGS[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("--json", action="store_true", help="print JSON on stdout, nothing else")
        if not reads:  # writes local files only: no server to download from
            p.set_defaults(run=run, parser=p)
            return p
        p.add_argument(
            "--allow-full-download",
            action="store_true",
            help="read files of any size from servers that ignore Range requests (they send "
            "the whole file; up to 64 MiB is read without this)",
        )
        p.set_defaults(run=run, parser=p)
        return p

    p = command("inspect", run_inspect, "format, counts, sizes, metadata and tensors")
    p.add_argument("path", nargs="+", metavar="PATH", help=PATH_HELP)
    p.add_argument("--tree", action="store_true", help="group tensors by module prefix")
    p.add_argument(
        "--verbose", action="store_true", help="list every tensor; show metadata values whole"
    )
    _key(p)

    p = command("id", run_id, "the structural hash (weight-inspect's), or --content")
    p.add_argument("path", nargs="+", metavar="PATH", help=PATH_HELP)
    p.add_argument(
        "--content",
        action="store_true",
        help="hash names, dtypes, shapes and tensor bytes (the same across formats)",
    )
    p.add_argument(
        "--digest",
        choices=ALGORITHMS,
        default=None,
        help="with --content: the per-tensor digest (default sha256). Only a sha256 id "
        "resists a forger: xxh3 and crc32c are checksums, which catch accidents (a flipped "
        "bit, a cut download) but not a weight changed on purpose with a few low bits "
        "flipped elsewhere to keep them; their ids print as xxh3:<hex> and crc32c:<hex>, "
        "never to be taken for a sha256 id",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="with --content: also check every digest the file stores against the data",
    )
    p.add_argument(
        "--trust-stored-digests",
        action="store_true",
        help="with --content, for files you trust: where the file stores the --digest of a "
        "tensor (safetensors tensorfile.digests, zTensor), take it unchecked instead of "
        "reading the data; a file changed after writing keeps its old id",
    )
    p.set_defaults(check=_check_id)

    p = command("summary", run_summary, "one line: format,version,tensors,metadata,hash")
    p.add_argument("path", nargs="+", metavar="PATH", help=PATH_HELP)
    _key(p)

    p = command("diff", run_diff, "tensors and metadata added, removed and changed")
    p.add_argument("a", help=PATH_HELP.split("; several")[0])
    p.add_argument("b", help="the file to compare with (any kind of path, a URL too)")
    p.add_argument("--format", choices=("text", "md"), default="text", help="text or markdown")
    p.add_argument("--data", action="store_true", help="also compare the tensor bytes")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show metadata values whole and each tensor's storage change",
    )
    p.add_argument(
        "--fail-on-diff", action="store_true", help="exit with status 1 when the files differ"
    )

    p = command("meta", run_meta, "print the metadata, or edit it (atomically: file + rename)")
    p.add_argument("path", nargs="+", metavar="PATH", help=PATH_HELP)
    p.add_argument(
        "--set", action="append", default=[], metavar="K=V", help="set a key (repeatable)"
    )
    p.add_argument(
        "--delete", action="append", default=[], metavar="K", help="delete a key (repeatable)"
    )
    p.add_argument("--clear", action="store_true", help="remove every key first")

    p = command("convert", run_convert, "convert between formats, tensor by tensor")
    p.add_argument("src", metavar="SRC", help="the file or checkpoint to read")
    p.add_argument("dst", metavar="DST", help="the file (or, with --shard-size, folder) to write")
    p.add_argument(
        "--to",
        choices=TARGETS,
        default=None,
        help="the output format (default: from DST's extension)",
    )
    p.add_argument("--compression", choices=("zstd",), default=None, help="zTensor only")
    p.add_argument("--level", type=int, default=None, help="zstd level (zTensor only)")
    p.add_argument(
        "--checksum",
        choices=("crc32c", "sha256", "xxh3"),
        default=None,
        help="per-tensor digests: crc32c or sha256 (zTensor v1.0), xxh3 or sha256 (v2), any "
        "of the three (safetensors: in the tensorfile.digests metadata)",
    )
    p.add_argument("--align", type=int, default=None, help="zTensor v2 blob alignment")
    p.add_argument(
        "--shard-size",
        default=None,
        metavar="SIZE",
        help="write a sharded safetensors checkpoint into the folder DST (5GB...)",
    )
    p.add_argument("--densify", action="store_true", help="store sparse tensors dense")
    _key(p)

    p = command("verify", run_verify, "check structure, digests, shards (and values, --deep)")
    p.add_argument("path", nargs="+", metavar="PATH", help=PATH_HELP)
    p.add_argument("--deep", action="store_true", help="also read every value (NaN, Inf, BOOL)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="fail every tensor no stored digest covers, also in a file that stores no "
        "digests at all (by default such a file passes on structure and completeness)",
    )

    _dataset(sub)

    p = command(
        "samples", run_samples, "write the sample files the documentation uses", reads=False
    )
    p.add_argument("dir", metavar="DIR", help="the folder to write them into (made if missing)")
    p.add_argument(
        "--force", action="store_true", help="replace samples in DIR that differ from these"
    )
    return parser
