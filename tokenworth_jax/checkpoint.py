"""Save and restore a pure state with its :class:`~tokenworth_jax.Spec` and :class:`~tokenworth_jax.HParams`.

``tw.save(path, state, spec, hp)`` writes one file; ``tw.load(path)`` returns ``(state, spec, hp)``
(a :class:`Checkpoint`), bit for bit, in this process or any other. A state of C stacked
configurations (``jax.vmap`` over ``tw.stack_hparams``) saves the same way: every leaf keeps its
leading axes.

**The format: a flat ``.npz`` with a JSON manifest**, not an orbax checkpoint. The file is a zip
archive (what ``numpy.savez`` writes) of one ``.npy`` array per leaf, named by its path in the
pytree (``state/.bank.emb``, ``hparams/eta_max``: the flat names of :mod:`tokenworth_jax.config`),
and ``manifest.json``: the format's name and layout, the library version that wrote it, the spec
(its shape fields, and each part by name and shape fields: :func:`tokenworth_jax.presets.describe`),
the batch shape, and the SHA-256 digest of every ``.npy`` member (``digests``). Why:

* it needs nothing but NumPy, which the library already needs. orbax-checkpoint is built for
  sharded, asynchronous, multi-host checkpoints of large models (it brings tensorstore and a
  dozen other packages); a controller's state is a few megabytes on one device, saved whole;
* ``.npy`` stores each array's raw bytes with its dtype and shape, so a restore is exact, and
  nothing is pickled: :func:`load` never unpickles, so opening a file from elsewhere runs no
  code, and the file opens without this library (``numpy.load(path)``; ``unzip -p path
  manifest.json`` shows what it holds, ``unzip -p path state/.bank.emb.npy | sha256sum`` a digest);
* the layout is the pytree's own (the state's fields, the hyperparameters' flat names), so a
  reader knows every leaf's name, shape and dtype from the spec alone, and checks each ``.npy``
  header against them before it reads a byte of data: a file of another layout, or one whose
  header claims another shape, is refused in one line, never allocated or read into a wrong state.

**What load checks**, each refusal one line naming the file and the leaf: the archive and its
manifest (format, layout); the leaves' names, shapes and dtypes against what the spec makes
(hyperparameters: int32 for the integer ones, one float dtype for the rest); every member's
CRC-32 (a flipped byte) and, from layout 2 on, its SHA-256 against the manifest's digest (a value
changed with a valid CRC); no Python objects (nothing is unpickled); a finite state (a NaN or an
infinity in the bank, the scorers or the probes); the hyperparameters' ranges. The digests catch
accidents and edits that did not update the manifest; they are not a signature: whoever can
rewrite the file can rewrite its manifest. :func:`save` refuses what :func:`load` would refuse,
so every file it writes loads.

A user who keeps everything in orbax can save the state and hyperparameters as the pytrees of
arrays they are, with the spec as :func:`tokenworth_jax.presets.describe`'s plain data.

**Parts are saved by name, never as code.** The scorer and the mode are functions, so the file
names them (``{"name": ..., "shapes": {...}}``). :func:`load` rebuilds those of the preset table
by name; any other (your own mode, ``tests/test_custom_mode.py``) is given to it as
``parts={name: value}``, keyed by that name (the part's own ``name``), and without it the load is
refused, naming the part and the argument. :func:`save` refuses a part that takes a name of the
table but is not the table's value (it would load as the table's). The file holds ``State.mode``
and ``HParams.mode`` of your own mode like any other arrays.

**Layouts.** A file says which layout it holds (:data:`LAYOUT`); this version writes layout 2 and
reads layouts 1 and 2 (:data:`READS`: layout 1, written by development versions before 0.3.0, has
no digests, so its leaves are checked by their CRC-32 alone), and refuses another (a newer one:
upgrade the library) in one line. The layouts are listed in docs/release.md. The host
:class:`~tokenworth_jax.Controller` has its own checkpoint (``state_dict``), which also keeps the
memories' payloads.

**Writing.** :func:`save` writes a temporary file beside ``path`` and moves it into place, so an
interrupted save leaves any earlier file whole; it refuses to replace an existing file unless
``overwrite=True`` (a bool: ``"yes"`` is refused), and a new file gets the mode your umask gives a
new file (``0644`` under the usual ``022``), as ``open(path, "w")`` would, while a replaced file keeps
its own mode (a ``0600`` file stays ``0600``). ``path`` is a file's name (a str or an ``os.PathLike``):
both functions work on a named file (the atomic replace; the archive checked before any data is
read), so ``None`` or an open file object is refused in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import stat
import zipfile
import zlib
from typing import Any, Mapping, NamedTuple

import jax
import numpy as np

from . import _doc
from ._version import __version__
from .config import CORE, PART_SLOTS, HParams, flatten, hparams_from_arrays, hparams_shapes, validate_hparams
from .controller import Spec, State, init
from .presets import MODES, SCORERS, describe, is_table_part, spec_from_dict
from .pytree import from_numpy, to_numpy

FORMAT = "tokenworth_jax.save"  #: the manifest's ``"format"``: a pure state with its spec and hyperparameters
LAYOUT = 2  #: the layout this version writes (docs/release.md lists them)
READS = (1, 2)  #: the layouts this version reads: 1 (no digests) and its own
MANIFEST = "manifest.json"
MANIFEST_LIMIT = 16 * 2**20  # bytes: a manifest is a few kilobytes; a larger one is not tw.save's
STATE, HPARAMS = "state/", "hparams/"  # the prefixes of the leaves' names
NPY = ".npy"
# what reading a member of a damaged or foreign archive raises (a failed CRC-32 is a BadZipFile)
ZIP_ERRORS = (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError, zlib.error)
FLOAT_DTYPES = ("float16", "float32", "float64")  # the hyperparameters' float dtypes .npy stores (not bfloat16)

__all__ = ["Checkpoint", "FORMAT", "LAYOUT", "READS", "load", "save"]


class Checkpoint(NamedTuple):
    """What :func:`load` returns; unpacks as ``state, spec, hp = tw.load(path)``."""

    state: State
    spec: Spec
    hp: HParams


_doc.fields(
    Checkpoint,
    state="State: the saved state, every leaf as it was saved (C stacked configurations keep their axis).",
    spec="Spec: the spec it was saved with, its parts rebuilt by name.",
    hp="HParams: its hyperparameters, validated as ``tw.hparams`` validates them.",
)


# ----- save ----------------------------------------------------------------------------------------------------------
def save(path: str | os.PathLike[str], state: State, spec: Spec, hp: HParams, *, overwrite: bool = False) -> None:
    """Write ``state`` with ``spec`` and ``hp`` to ``path``, an ``.npz`` file that :func:`load` reads.

    The file is written to a temporary name beside ``path`` and moved into place, so an interrupted
    save leaves any earlier file whole. A new file gets the mode the process's umask gives a new file; a
    replaced one keeps its mode.

    Args:
        path: the file to write, a str or an ``os.PathLike`` (the name is used as given; its folder must
            exist).
        state: one configuration's :class:`~tokenworth_jax.State`, or C stacked ones (the same
            leading axes as ``hp``), as ``spec`` makes it for ``hp``; every float leaf finite.
        spec: the :class:`~tokenworth_jax.Spec` the state belongs to.
        hp: its :class:`~tokenworth_jax.HParams` (int32 integers, one float dtype of float16,
            float32 or float64 for the rest).
        overwrite: replace an existing file at ``path``, keeping its mode (keyword-only, a bool; by default
            it is refused).

    Returns:
        None. The file holds the state, the hyperparameters and a manifest (the spec, the batch
        shape and each leaf's SHA-256 digest).

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        FileNotFoundError: the folder of ``path`` does not exist.
        IsADirectoryError: ``path`` is a folder.
        TypeError: ``path`` is not a str or an ``os.PathLike`` (None, a file object), ``overwrite`` is
            not a bool, ``spec`` or ``state`` is not a Spec or a State.
        ValueError: a state that is not one ``spec`` makes for ``hp``, or holds a NaN or an
            infinity; hyperparameters not built for its parts or of mixed dtypes; a part that
            takes a name of the preset table but is not the table's value. One line each;
            nothing is written.
    """
    target = _path(path, "tw.save")
    if not isinstance(overwrite, (bool, np.bool_)):  # "yes", 0, None are not a decision to replace a file
        raise TypeError(f"tw.save: overwrite must be True or False, got {overwrite!r} ({type(overwrite).__name__})")
    overwrite = bool(overwrite)
    if not isinstance(spec, Spec):
        raise TypeError(f"tw.save: spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
    if not isinstance(state, State):
        raise TypeError(f"tw.save: state must be a tokenworth_jax.State, got {type(state).__name__}")
    validate_hparams(hp, spec.parts)
    for slot in PART_SLOTS:
        part = getattr(spec, slot)
        if part.name in (SCORERS if slot == "scorer" else MODES) and not is_table_part(slot, part):
            raise ValueError(f"tw.save: the {slot} named {part.name!r} is not the preset table's {part.name!r} (it would "
                             f"load as that one): give your {slot} a name of its own")
    _check_target(target, overwrite)
    arrays = {STATE + k: v for k, v in to_numpy(state).items()}
    hp_arrays = {HPARAMS + k: np.asarray(v) for k, v in flatten(hp, spec.parts).items()}
    batch_shape = tuple(np.shape(hp.gamma))
    floats = _hparams_float_dtype({k: v.dtype for k, v in hp_arrays.items()})
    if floats is not None and floats.name not in FLOAT_DTYPES:
        raise ValueError(f"tw.save: the hyperparameters are {floats.name}, which .npy cannot store: build them as one "
                         f"of {FLOAT_DTYPES} (tw.hparams(..., dtype=...))")
    _, expected = _layout(spec, batch_shape, floats)
    found = {k: (v.shape, v.dtype) for k, v in hp_arrays.items()}
    problem = _mismatch(found, {k: v for k, v in expected.items() if k.startswith(HPARAMS)})
    if problem:
        raise ValueError("tw.save: these hyperparameters are not what tw.hparams builds for this spec (int32 "
                         f"integers, one float dtype): {problem}")
    problem = _mismatch({k: (v.shape, v.dtype) for k, v in arrays.items()},
                        {k: v for k, v in expected.items() if k.startswith(STATE)})
    if problem:
        raise ValueError(f"tw.save: this state is not one the spec makes for these hyperparameters: {problem}")
    for leaf, arr in arrays.items():
        problem = _nonfinite(leaf, arr, spec)
        if problem:
            raise ValueError(f"tw.save: {problem}: a state with a NaN or an infinity is not saved (tw.checked "
                             "finds the step that made it)")
    arrays.update(hp_arrays)

    members = {}
    for leaf, arr in arrays.items():
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, np.asarray(arr), allow_pickle=False)
        members[leaf + NPY] = buffer.getvalue()
    manifest = {"format": FORMAT, "layout": LAYOUT, "tokenworth_jax": __version__, "spec": describe(spec),
                "batch_shape": list(batch_shape),
                "digests": {name: hashlib.sha256(data).hexdigest() for name, data in members.items()}}
    _write(target, json.dumps(manifest, indent=1, default=_plain).encode(), members, overwrite)


def _path(path: Any, who: str) -> str:
    """``path`` as a str (``os.fspath``), or a one-line TypeError naming what was given instead: None, bytes, or a
    file object (save and load work on a named file: the atomic replace, and the checks of the archive before any
    data is read)."""
    target = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(target, str):
        hint = ": give the file's name, not an open file" if hasattr(path, "read") or hasattr(path, "write") else ""
        raise TypeError(f"{who}: path must be a file's path, a str or an os.PathLike (pathlib.Path), got "
                        f"{type(path).__name__}{hint}")
    return target


def _check_target(target: str, overwrite: bool) -> None:
    """Refuse a target that is a folder, lies in a missing folder, or exists (unless ``overwrite``), naming it."""
    if not target:
        raise ValueError("tw.save: path is empty: name the file to write")
    if os.path.isdir(target):
        raise IsADirectoryError(f"tw.save: {target} is a folder: name the file to write")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"tw.save: cannot write {target}: the folder {os.path.dirname(target) or folder} does "
                                "not exist")
    if not overwrite and os.path.lexists(target):
        raise FileExistsError(f"tw.save: {target} exists: pass overwrite=True to replace it")


def _write(target: str, manifest: bytes, members: Mapping[str, bytes], overwrite: bool) -> None:
    """The archive, written to a new file beside ``target`` (mode 0666 less the umask, as ``open`` makes one),
    flushed to disk, then moved into place: replacing ``target`` only if ``overwrite``."""
    folder = os.path.dirname(os.path.abspath(target))
    while True:  # a name of our own: O_EXCL, so nothing else's file is ever touched
        tmp = os.path.join(folder, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise type(e)(f"tw.save: cannot write {target}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
                z.writestr(MANIFEST, manifest)
                for name, data in members.items():
                    z.writestr(name, data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            with contextlib.suppress(FileNotFoundError):  # a replaced file keeps its mode (0600 stays 0600)
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(tmp, target)
        else:
            try:  # a hard link never replaces: a file made at target since the check above is kept
                os.link(tmp, target)
            except FileExistsError:
                raise FileExistsError(f"tw.save: {target} exists: pass overwrite=True to replace it") from None
            except OSError:  # no hard links on this file system
                if os.path.lexists(target):
                    raise FileExistsError(f"tw.save: {target} exists: pass overwrite=True to replace it") from None
                os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# ----- load ----------------------------------------------------------------------------------------------------------
def load(path: str | os.PathLike[str], *, parts: Mapping[str, Any] | None = None) -> Checkpoint:
    """The state, spec and hyperparameters :func:`save` wrote to ``path``, bit for bit.

    Every leaf's shape and dtype is checked against what the spec makes before its data is read,
    and its bytes against their CRC-32 and the manifest's SHA-256 digest. The arrays are placed
    on JAX's default device.

    Args:
        path: a file :func:`save` wrote (layout 1 or 2: :data:`READS`), by its name: a str or an
            ``os.PathLike``.
        parts: ``{name: part}``, keyed by each part's own ``name``: the scorers and modes the
            file names that the preset table does not know (keyword-only). Entries the file
            does not name are unused, so one mapping of your own parts serves every file.

    Returns:
        A :class:`Checkpoint` ``(state, spec, hp)``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        IsADirectoryError: ``path`` is a folder.
        TypeError: ``path`` is not a str or an ``os.PathLike`` (None, a file object); ``parts`` is not a
            mapping of scorers and modes.
        ValueError: one line naming the file (and the leaf): not a save of this format, a newer
            or older layout, a part not in the table and not in ``parts`` (or given under another
            name), a leaf missing, unknown, or of another shape or dtype than the spec makes, a
            leaf whose bytes fail their CRC-32 or digest, a leaf of Python objects, a NaN or an
            infinity in the state, hyperparameters out of range, a float64 spec while JAX's
            64-bit mode is off.
    """
    where = _path(path, "tw.load")
    if os.path.isdir(where):
        raise IsADirectoryError(f"tw.load: {where} is a folder, not a file tw.save wrote")
    if not os.path.exists(where):
        raise FileNotFoundError(f"tw.load: {where} does not exist")
    try:
        archive = zipfile.ZipFile(where)
    except (zipfile.BadZipFile, EOFError, ValueError):
        raise ValueError(f"tw.load: {where} is not a tokenworth_jax save file (not an .npz archive)") from None
    with archive as z:
        manifest, members = _contents(z, where)
        try:
            spec = spec_from_dict(manifest["spec"], parts)
        except (TypeError, ValueError) as e:
            raise type(e)(f"tw.load: {where}: {e}") from None
        headers = {leaf: _header(z, info, where, leaf) for leaf, info in members.items()}
        batch_shape = tuple(manifest["batch_shape"])
        floats = _hparams_float_dtype({k: d for k, (_, d, _) in headers.items()})
        template, expected = _layout(spec, batch_shape, floats if floats is not None and floats.name in FLOAT_DTYPES
                                     else np.dtype(np.float32))
        problem = _mismatch({k: (s, d) for k, (s, d, _) in headers.items()}, expected)
        if problem:
            raise ValueError(f"tw.load: {where}: {problem}")
        digests = manifest.get("digests") if manifest["layout"] >= 2 else None
        if digests is not None:
            stray = sorted(set(digests) - {leaf + NPY for leaf in members})
            if stray:
                raise ValueError(f"tw.load: {where}: its manifest has a digest of {stray[0]}, which the file does not "
                                 "hold")
        for leaf, info in members.items():  # every member holds the bytes its header says, before any is read
            shape, dtype, offset = headers[leaf]
            size = offset + int(np.prod(shape, dtype=object)) * dtype.itemsize
            if info.file_size != size:
                raise ValueError(f"tw.load: {where}: leaf {leaf} holds {info.file_size} bytes, its header "
                                 f"({shape}/{dtype}) says {size}: the file was cut short or changed")
        arrays = {leaf: _read(z, info, where, leaf, None if digests is None else digests.get(leaf + NPY, ""))
                  for leaf, info in members.items()}
    for leaf, arr in arrays.items():
        problem = _nonfinite(leaf, arr, spec)
        if problem:
            raise ValueError(f"tw.load: {where}: {problem}: tw.save writes a finite state, so the file was changed")
    try:  # each step refuses what it cannot rebuild, naming it
        hp = hparams_from_arrays({k[len(HPARAMS):]: v for k, v in arrays.items() if k.startswith(HPARAMS)}, spec.parts)
        state = from_numpy(template, {k[len(STATE):]: v for k, v in arrays.items() if k.startswith(STATE)})
    except ValueError as e:
        raise ValueError(f"tw.load: {where}: {e}") from None
    return Checkpoint(state=state, spec=spec, hp=hp)


def _contents(z: zipfile.ZipFile, where: str) -> tuple[dict[str, Any], dict[str, zipfile.ZipInfo]]:
    """The checked manifest, and ``{leaf: member}`` of every ``.npy`` (names only: no data is read)."""
    infos = z.infolist()
    names = [i.filename for i in infos]
    if MANIFEST not in names:
        raise ValueError(f"tw.load: {where} has no {MANIFEST}: it is an .npz archive, but not one tw.save wrote")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"tw.load: {where} holds {twice[0]!r} twice: not an archive tw.save wrote")
    info = z.getinfo(MANIFEST)
    if info.file_size > MANIFEST_LIMIT:
        raise ValueError(f"tw.load: {where}: its {MANIFEST} is {info.file_size} bytes, more than tw.save writes")
    try:
        manifest = json.loads(z.read(MANIFEST))
    except ZIP_ERRORS as e:
        raise _unreadable(e, where, f"its {MANIFEST}") from None
    except ValueError:
        raise ValueError(f"tw.load: {where}: its {MANIFEST} is not valid JSON") from None
    _check_manifest(manifest, where)
    members = {}
    for i in infos:
        if i.filename == MANIFEST:
            continue
        if not i.filename.endswith(NPY) or not i.filename.startswith((STATE, HPARAMS)):
            raise ValueError(f"tw.load: {where} holds {i.filename!r}, which layout {manifest['layout']} does not know")
        members[i.filename[:-len(NPY)]] = i
    return manifest, members


def _check_manifest(manifest: Any, where: str) -> None:
    """The manifest is this format's, of a layout this version reads (ValueError, one line, if not)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise ValueError(f"tw.load: {where} holds format {got!r}, not {FORMAT!r} (a pure state saved by tw.save)")
    layout, version = manifest.get("layout"), manifest.get("tokenworth_jax", "?")
    if isinstance(layout, int) and layout > LAYOUT:
        raise ValueError(f"tw.load: {where} has layout {layout}, written by tokenworth_jax {version}, newer than this "
                         f"version ({__version__}, which reads layouts {_listed(READS)}): upgrade tokenworth-jax to "
                         "load it")
    if type(layout) is not int or layout not in READS:
        raise ValueError(f"tw.load: {where} has layout {layout!r} (tokenworth_jax {version}); this version reads "
                         f"layouts {_listed(READS)} only: load it with the release that wrote it")
    batch_shape = manifest.get("batch_shape")
    if not isinstance(manifest.get("spec"), dict) or not isinstance(batch_shape, list):
        raise ValueError(f"tw.load: {where}: its manifest lacks the spec or the batch shape")
    if not all(type(n) is int and n >= 0 for n in batch_shape):
        raise ValueError(f"tw.load: {where}: its manifest's batch shape {batch_shape!r} is not a list of sizes")
    digests = manifest.get("digests")
    if layout >= 2 and not (isinstance(digests, dict) and all(isinstance(v, str) for v in digests.values())):
        raise ValueError(f"tw.load: {where}: its manifest (layout {layout}) lacks the digests of its leaves")


def _header(z: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, leaf: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` from the member's ``.npy`` header: the first bytes, never its data."""
    try:
        with z.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f".npy version {version}")
            offset = f.tell()
    except ZIP_ERRORS as e:
        raise _unreadable(e, where, f"leaf {leaf}") from None
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"tw.load: {where}: leaf {leaf} has no .npy header tw.save writes "
                         f"({_first_line(e)})") from None
    if dtype.hasobject:
        raise ValueError(f"tw.load: {where}: leaf {leaf} holds Python objects (dtype {dtype}), which tw.load never "
                         "unpickles: not a file tw.save wrote")
    return tuple(shape), dtype, offset


def _read(z: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, leaf: str, digest: str | None) -> np.ndarray:
    """The leaf's array, once its bytes match their CRC-32 and (layout 2) its digest."""
    try:
        data = z.read(info)
    except ZIP_ERRORS as e:
        raise _unreadable(e, where, f"leaf {leaf}") from None
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"tw.load: {where}: leaf {leaf} does not match its SHA-256 digest in the manifest "
                         + ("(the manifest has none)" if not digest else "(its bytes were changed after tw.save "
                            "wrote them)"))
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


# ----- what a spec makes ---------------------------------------------------------------------------------------------
def _layout(spec: Spec, batch_shape: tuple[int, ...], floats: np.dtype | None
            ) -> tuple[State, dict[str, tuple[tuple[int, ...], np.dtype]]]:
    """The state template, and ``{leaf: (shape, dtype)}`` of every leaf a file of ``spec`` holds (hyperparameters
    of the float dtype ``floats``, with ``batch_shape`` as their leading axes): traced only, nothing computed."""
    hp = hparams_shapes(spec.parts, np.dtype(np.float32) if floats is None else floats, batch_shape)
    fn: Any = lambda h: init(spec, h)  # noqa: E731
    for _ in batch_shape:  # one scalar per configuration: its axes are the batch axes
        fn = jax.vmap(fn)
    template: State = jax.eval_shape(fn, hp)
    expected = {STATE + k: (tuple(x.shape), np.dtype(x.dtype)) for k, x in _leaves(template).items()}
    expected.update({HPARAMS + k: (tuple(x.shape), np.dtype(x.dtype)) for k, x in flatten(hp, spec.parts).items()})
    return template, expected


def _leaves(tree: Any) -> dict[str, Any]:
    return {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def _hparams_float_dtype(dtypes: Mapping[str, Any]) -> np.dtype | None:
    """The float dtype of the hyperparameters (``dtypes`` by leaf): that of the first float one (the core's ``w0``),
    which the rest must share; None when it is missing or not a float (the leaf is then reported). bfloat16 (kind
    "V" to NumPy) is returned, for save to name it."""
    first = next(HPARAMS + n for n in CORE.names() if not CORE.is_int(n))
    if first not in dtypes:
        return None
    dtype = np.dtype(dtypes[first])
    return dtype if dtype.kind in "fV" else None


def _mismatch(found: Mapping[str, tuple[Any, Any]], expected: Mapping[str, tuple[Any, Any]]) -> str | None:
    """What differs between the leaves ``found`` and those ``expected`` (``{leaf: (shape, dtype)}``), or None."""
    for leaf in expected:
        if leaf not in found:
            return f"lacks leaf {leaf}"
    for leaf in found:
        if leaf not in expected:
            return f"holds leaf {leaf}, which this spec does not make"
    for leaf, (shape, dtype) in expected.items():
        got_shape, got_dtype = found[leaf]
        if tuple(got_shape) != tuple(shape) or np.dtype(got_dtype) != np.dtype(dtype):
            return (f"leaf {leaf} has {tuple(got_shape)}/{np.dtype(got_dtype)}, expected "
                    f"{tuple(shape)}/{np.dtype(dtype)}")
    return None


def _nonfinite(leaf: str, arr: np.ndarray, spec: Spec) -> str | None:
    """Where the state leaf ``leaf`` holds a NaN or an infinity, or None. A part's own state is checked only for
    the table's parts (your own mode's state may hold what it likes)."""
    if not leaf.startswith(STATE) or np.dtype(arr.dtype).kind not in "fc":
        return None
    path = leaf[len(STATE):]
    for slot in PART_SLOTS:
        if path == f".{slot}" or path.startswith((f".{slot}.", f".{slot}[")):
            if not is_table_part(slot, getattr(spec, slot)):
                return None
    bad = ~np.isfinite(np.asarray(arr))
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"leaf {leaf} holds {np.asarray(arr)[at]} at index {at}"


def _unreadable(error: BaseException, where: str, what: str) -> ValueError:
    """The one-line refusal of a member whose bytes cannot be read: a failed CRC-32 (a changed byte), or another
    fault of the archive."""
    if isinstance(error, zipfile.BadZipFile):
        return ValueError(f"tw.load: {where}: {what} is damaged: its bytes fail their check ({_first_line(error)}); "
                          "the file was changed after it was written")
    return ValueError(f"tw.load: {where}: {what} cannot be read ({_first_line(error)})")


# ----- small helpers -------------------------------------------------------------------------------------------------
def _listed(values: tuple[int, ...]) -> str:
    return " and ".join(str(v) for v in values)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _plain(value: Any) -> Any:
    """A NumPy scalar in the spec (``Spec(capacity=np.int64(8))`` is valid) as the Python number JSON holds."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"tw.save: the spec holds {value!r} ({type(value).__name__}), which its JSON manifest cannot hold")
