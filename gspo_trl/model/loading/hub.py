"""A hub model that cannot be had: one line saying what was looked for where, and the fixes.

Every command that loads a model (train, calibrate, check-logprobs, eval, filter, merge) loads
it inside `hub_model_errors`. A model that is neither a local folder nor in the hub cache,
with the hub unreachable or `HF_HUB_OFFLINE=1` (or a hub id the hub does not know), otherwise
ends in transformers' chained OSErrors: a 100-line traceback naming no fix. The data has the
same one-line treatment (gspo_trl.data.sources).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from gspo_trl.core.errors import ModelNotFoundError


def _hub_failure(error: BaseException) -> BaseException | None:
    """The hub or network error at the root of `error`'s chain, or None when it is something else."""
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled, ConnectionError)):
            return error
        if type(error).__module__.startswith(("httpx", "httpcore", "requests", "urllib3")):
            return error
        error = error.__cause__ or error.__context__
    return None


def offline() -> bool:
    """True when the hub libraries will not download (`HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE`)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def not_found_message(name: str, setting: str, cause: BaseException | None = None) -> str:
    """'SETTING NAME: not a local folder nor in the hub cache (DIR) ...; fixes' for `name`."""
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    where = f"{setting} {name!r}: not a local folder nor in the hub cache ({constants.HF_HUB_CACHE})"
    if isinstance(cause, GatedRepoError):
        return f"{where}, and the hub refuses it (gated): accept its terms on the hub, then `hf auth login`"
    if isinstance(cause, RepositoryNotFoundError):
        return f"{where}, and the hub has no such model: check the id (`hf auth login` for a private one)"
    if isinstance(cause, RevisionNotFoundError):
        return f"{where}, and the hub has no such revision of it: check model.revision"
    if offline():
        reason = "and HF_HUB_OFFLINE=1 forbids downloading it"
        online = "unset HF_HUB_OFFLINE to download it"
    else:
        detail = str(cause).splitlines()[0] if cause is not None and str(cause) else "no connection"
        reason = f"and the hub cannot be reached ({type(cause).__name__}: {detail})"
        online = "check the connection"
    return (
        f"{where}, {reason}. Download it first (`hf download {name}` where the hub is reachable; "
        f"then HF_HUB_OFFLINE=1 reads the cache), point {setting} at a local folder, or {online}"
    )


def _is_local(name: str) -> bool:
    return Path(name).expanduser().exists()


@contextlib.contextmanager
def hub_model_errors(name: str, setting: str = "model.name_or_path") -> Iterator[None]:
    """Loading `name` (a tokenizer, config or model) inside: a hub or network failure becomes one
    ModelNotFoundError naming `setting`, `name`, the cache and the fixes. Other errors pass."""
    try:
        yield
    except ModelNotFoundError:
        raise
    except (OSError, ValueError) as error:
        cause = _hub_failure(error)
        if cause is None or _is_local(name):
            raise
        raise ModelNotFoundError(not_found_message(name, setting, cause)) from None


def check_cached_when_offline(name: str, revision: str | None, setting: str = "model.name_or_path") -> None:
    """Refuse, before anything loads, a hub model that is not cached when the hub is off limits."""
    if _is_local(name) or not offline():
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a valid hub id; loading the model will say so
        return
    if not isinstance(cached, str) or not os.path.isfile(cached):
        raise ModelNotFoundError(not_found_message(name, setting))
