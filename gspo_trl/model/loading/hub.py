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

from gspo_trl.core.errors import ModelNotFoundError, RecipeError


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


WHOAMI_TIMEOUT_S = 10.0
"""How long the push check waits for the hub: a firewall that drops packets would otherwise hold
`train` for httpx's own timeout before anything is said."""


def check_hub_push(push_to_hub: bool, hub_model_id: str | None, offline_ok: bool = False) -> None:
    """Refuse, before the model loads, a `push_to_hub` run that cannot push: transformers' Trainer
    creates the repo in its `__init__` (`self.init_hf_repo()`, transformers/trainer.py:587 ->
    `hf_api().create_repo(repo_name, token=token, ...)`, :4099), so without a network the run
    died in a 98-line httpx.ConnectError traceback after the model had loaded (61 lines with
    HF_HUB_OFFLINE=1). `offline_ok` (`validate`) checks the settings only (HF_HUB_OFFLINE, a
    token), not the network: a recipe is valid before the machine it will run on is online."""
    if not push_to_hub:
        return
    target = f"push_to_hub: true (hub_model_id {hub_model_id!r})" if hub_model_id else "push_to_hub: true"
    off = "--push_to_hub false to keep the run local"
    if offline():
        raise RecipeError(f"{target}, but HF_HUB_OFFLINE=1 forbids the hub; unset it, or {off}")
    from huggingface_hub import get_token

    token = get_token()
    if token is None:
        raise RecipeError(
            f"{target} needs a hub token with write access: `hf auth login` or HF_TOKEN, or {off}"
        )
    if offline_ok:
        return
    from huggingface_hub import constants, get_session
    from huggingface_hub.utils import build_hf_headers

    try:
        response = get_session().get(
            f"{constants.ENDPOINT}/api/whoami-v2",
            headers=build_hf_headers(token=token),
            timeout=WHOAMI_TIMEOUT_S,
        )
    except Exception as error:
        detail = str(error).splitlines()[0] if str(error) else "no connection"
        raise RecipeError(
            f"{target}, but the hub ({constants.ENDPOINT}) cannot be reached "
            f"({type(error).__name__}: {detail}); check the connection, or {off}"
        ) from None
    if response.status_code in (401, 403):
        raise RecipeError(
            f"{target}, but the hub refuses the token (HTTP {response.status_code}): `hf auth login` with a "
            f"write token, or {off}"
        )
