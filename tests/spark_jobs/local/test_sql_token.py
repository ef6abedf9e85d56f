"""The SQL endpoint's token: made private on first use, and refused when anyone else could read
it or could have written a guessable one."""

import stat

import pytest

from spark_jobs.config import load_settings
from spark_jobs.errors import SigflowError
from spark_jobs.local.sql_endpoint import ensure_token, token_file


def test_a_missing_token_is_made_random_and_private_and_kept(tmp_path):
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path)})
    token = ensure_token(s)
    path = token_file(s)
    assert len(token) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_token(s) == token  # the next start keeps it: clients' copies stay good
    other = load_settings(env={}, overrides={"data_dir": str(tmp_path / "other")})
    assert ensure_token(other) != token


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o666])
def test_a_token_others_may_read_is_refused(tmp_path, mode):
    path = tmp_path / "token"
    path.write_text("a-long-enough-token-0123456789\n")
    path.chmod(mode)
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "sql_token_file": str(path)})
    with pytest.raises(SigflowError, match="may be read by other users"):
        ensure_token(s)


def test_a_short_token_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text("guess\n")
    path.chmod(0o600)
    s = load_settings(env={}, overrides={"data_dir": str(tmp_path), "sql_token_file": str(path)})
    with pytest.raises(SigflowError, match="5 characters"):
        ensure_token(s)
