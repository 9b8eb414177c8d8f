"""The root of every error tfx-bridge raises on purpose.

Each component has its own typed subclasses (e.g.
``tfx_bridge.components.parquet_example_gen.errors``), and each shared module
that refuses input its own (``storage.names.UnsafeNameError``,
``artifacts.tfrecord.RecordFileError``, ...), raised whoever the caller. The CLI turns any
``BridgeError`` into one message on stderr and exit code 2 (bad input or
configuration); a failed check on a model or data set is a recorded result
with exit code 1, not an exception; ``Busy`` (a lock another run holds) is
exit code 4, retryable.
"""


class BridgeError(ValueError):
    """Bad input or configuration. Retrying without a change will not help."""


class Busy(Exception):
    """Another run holds what this one needs (a lock). Retrying later will help.

    Mixed into a component's own error type; the CLI exits 4 for it.
    """


class CheckFailed(BridgeError):
    """A check on data or a model failed (anomalies, not equivalent, push refused).

    The result is recorded on the output artifact (blessed=0 / pushed=0) before
    this is raised; the CLI exits 1 for it. Retrying without fixing the data or
    the model gives the same result.
    """


class ResourceError(BridgeError):
    """A write the machine refused: no space, no quota, no permission, a read-only
    file system. Names the path and what to free or fix; bad input (exit 2), since
    retrying unchanged will not help."""


# What to free or fix, per errno; {access} and {elsewhere} depend on whether the
# refused operation was a write.
_RESOURCE_FIXES = {
    "ENOSPC": "free space on that disk (df -h), or {elsewhere}",
    "EDQUOT": "free space within the quota, or {elsewhere}",
    "EACCES": "give this user {access} to it, or {elsewhere}",
    "EPERM": "give this user {access} to it, or {elsewhere}",
    "EROFS": "that file system is mounted read-only: {elsewhere}",
}


def resource_error(error: OSError, path, doing: str = "writing", intact: bool = False,
                   writing: bool = True):
    """A :class:`ResourceError` for an OSError that is the machine's refusal (the
    errnos above), naming ``path``; None for any other OSError. ``writing``: the refused
    operation wrote (the fix says write access, somewhere else to write). ``intact``:
    the caller stages its output, so it may say nothing was half-written."""
    import errno as errnos

    name = errnos.errorcode.get(error.errno or 0, "")
    if name not in _RESOURCE_FIXES:
        return None
    fix = _RESOURCE_FIXES[name].format(
        access="write access" if writing else "access",
        elsewhere="write somewhere else" if writing else "use another path")
    return ResourceError(
        f"{error.strerror or name} ({name}) while {doing} {path}: {fix}."
        + (" Nothing was half-written: the previous state is as it was." if intact else ""))


def os_error_within(error: BaseException):
    """The OSError ``error`` is, or wraps: Beam re-raises a worker's or a background
    writer's ``OSError`` as another type (its ``__cause__`` or ``__context__``, or
    only its ``[Errno N] text: 'path'`` in the message), TF as its own status
    errors. None when there is none.

    >>> try:
    ...     try:
    ...         raise OSError(28, "No space left on device", "/out/part-0")
    ...     except OSError as e:
    ...         raise RuntimeError("writer failed") from e
    ... except RuntimeError as wrapped:
    ...     os_error_within(wrapped).filename
    '/out/part-0'
    >>> os_error_within(RuntimeError("OSError: [Errno 30] Read-only file system: '/x/y' "
    ...                              "[while running 'Write']")).errno
    30
    """
    import re

    seen = set()
    stack = [error]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen or len(seen) > 50:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return e
        stack += [e.__context__, e.__cause__]
    found = re.search(r"\[Errno (\d+)\] ([^:\]\n]+)(?:: '([^'\n]*)')?", str(error))
    if found:
        return OSError(int(found.group(1)), found.group(2).strip(), found.group(3))
    return None


# Lines TF puts before the message that says what went wrong.
_NOISE = ("Graph execution error", "Detected at", "Traceback", "File ", "[[",
          "<stack traces")


def informative_line(error: BaseException) -> str:
    """The line of an exception that says what went wrong (at most 300 characters).

    TF's errors open with boilerplate ("Graph execution error:", "Detected at
    node ...", "<stack traces unavailable>"), prefix the real line with
    ``{{function_node ...}}`` and end eager errors with an ``[Op:Name]`` tag;
    all are skipped.
    """
    import re

    prefix = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
    op_tag = re.compile(r"\s*\[Op:\w+\]$")
    lines = [op_tag.sub("", prefix.sub("", ln.strip())) for ln in str(error).splitlines()
             if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(_NOISE)]
    return (useful or lines or [""])[0][:300]


def short_message(error: BaseException) -> str:
    """``Type: the informative line`` of an exception, for a report or table cell."""
    return f"{type(error).__name__}: {informative_line(error)}"


# JSON {file name: the user's path}: module files that run from a copy (TFX packages a
# module file into a wheel and installs it in a temp folder, in every process that
# loads it, ranks included) are named by the user's own path. Set by the component
# that loads them, for a block (tfx_bridge.envvars.scoped); child processes inherit it.
USER_SOURCES_ENV = "TFX_BRIDGE_USER_SOURCES"


def _user_sources() -> dict:
    import json
    import os

    try:
        found = json.loads(os.environ.get(USER_SOURCES_ENV, "{}")[:65536])
    except ValueError:
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(found, dict) else {}


def _shown(filename: str, sources: dict) -> str:
    """``filename``, or the user's own file where it is a copy of one."""
    import os

    user = sources.get(os.path.basename(filename))
    return user if user and os.path.abspath(filename) != os.path.abspath(user) else filename


def user_frames(error: BaseException) -> str:
    """``file:line in function`` of the frames in the user's own code (a run_fn, a
    preprocessing_fn, their modules): the traceback without the library's frames
    (site-packages, tfx-bridge's own, the interpreter's), a copy of a module file
    named by the user's own file (:data:`USER_SOURCES_ENV`). A SyntaxError gives
    its line."""
    import os
    import traceback

    sources = _user_sources()
    if isinstance(error, SyntaxError) and error.filename:
        return f"{_shown(error.filename, sources)}:{error.lineno}"
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stdlib = os.path.dirname(os.__file__)
    frames = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = os.path.abspath(frame.filename)
        if ("site-packages" in path or path.startswith((ours + os.sep, stdlib + os.sep))
                or frame.filename.startswith("<")):
            continue
        frames.append(f"{_shown(frame.filename, sources)}:{frame.lineno} in {frame.name}")
    return "; ".join(frames[-3:])


def describe_failure(error: BaseException) -> str:
    """``Type: message (at the user's file:line ...)``: what a user needs, in one line."""
    where = user_frames(error)
    text = str(error).strip()
    message = text.splitlines()[0][:300].rstrip(".") if text else ""
    return f"{type(error).__name__}: {message}" + (f" (at {where})" if where else "")
