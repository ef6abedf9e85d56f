"""No secret is committed: compose, the images, configs, docs and code take secrets from
`.env` (git-ignored) or the environment, and `.env.example` holds placeholders only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDERS = {"change-me", "change-me-too"}
SECRET_NAME = r"[\w.-]*(?:password|passwd|secret|token|access[_-]?key|api[_-]?key)[\w.-]*"
# A setting given a literal (not ${VAR}, not empty) in a config, compose file, Dockerfile or doc.
# The value is on the same line: a key that opens a nested block (`name:` then a newline) holds no value.
CONFIG_ASSIGNMENT = re.compile(rf"(?im)^[\s>#*-]*[\"']?({SECRET_NAME})[\"']?[ \t]*[:=][ \t]*[\"']?([^\s\"'$#{{][^\s\"']*)")
# YAML's plain value on the line below its key (`password:` then `  hunter2`), not a nested mapping.
NEXT_LINE_VALUE = re.compile(rf"(?im)^[ \t-]*({SECRET_NAME}):[ \t]*\n[ \t]+([^\s\"'$#{{:][^\s:]*)[ \t]*$")
# A string literal assigned to a secret-named variable or argument in code.
CODE_ASSIGNMENT = re.compile(rf"(?i)\b({SECRET_NAME})\s*[:=]\s*[\"']([^\"']{{6,}})[\"']")
KEY_MATERIAL = re.compile(r"AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|eyJ[\w-]{10,}\.eyJ[\w-]{10,}")


def _tracked() -> list[Path]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in files.splitlines() if (REPO / name).is_file()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def secret_looking_values(path: Path, text: str) -> list[str]:
    found = [f"{path.name}: key material" for _ in KEY_MATERIAL.finditer(text)]
    if path.suffix == ".py":
        assignments = CODE_ASSIGNMENT.findall(text)
    else:
        assignments = CONFIG_ASSIGNMENT.findall(text) + NEXT_LINE_VALUE.findall(text)
    for name, value in assignments:
        if path.name == ".env.example" and value in PLACEHOLDERS:
            continue
        if path.suffix == ".py" and (value.startswith(("{", "$")) or " " in value):
            continue  # a template or a sentence, not a credential
        if name.lower().endswith("_file") and value.startswith("/"):
            continue  # where a secret is kept, not the secret
        if value.endswith("("):
            continue  # a call that reads the secret (a doc's example), not a literal
        if name.lower() == "secrets":
            continue  # compose's secrets: the names of the files it passes, not values
        found.append(f"{path.relative_to(REPO)}: {name} = {value[:40]}")
    return found


def test_no_secret_looking_value_is_committed():
    found = []
    for path in _tracked():
        if "tests" in path.relative_to(REPO).parts[:1]:
            continue  # test fixtures generate their credentials at run time
        text = _text(path)
        if text is not None:
            found += secret_looking_values(path, text)
    assert found == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scanner itself, on the shapes a committed secret takes."""
    leaks = {
        "docker-compose.yml": "  environment:\n    POSTGRES_PASSWORD: hunter2hunter\n",
        "spark-defaults.conf": "spark.hadoop.fs.s3a.secret.key=wJalrXUtnFEMI\n",
        ".env.example": "MINIO_ROOT_PASSWORD=realpassword1\n",
        "settings.py": 'kafka_password = "s3cr3t-value"\n',
        "values.yaml": "postgres:\n  password:\n    hunter2hunter\n",
        "notes.md": "aws key AKIAABCDEFGHIJKLMNOP in the doc\n",
    }
    for name, text in leaks.items():
        path = REPO / name  # only the name and suffix matter to the scanner
        assert secret_looking_values(path, text), name
    safe = {
        "docker-compose.yml": "    POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:?set it in .env}\n",
        ".env.example": "MINIO_ROOT_PASSWORD=change-me-too\n",
        "cli.py": "token = _ENVIRON.set(environ)\npassword_file = path\n",
        "compose.yml": "    AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE: /opt/airflow/auth/passwords.json\n",
        "docker-compose.yaml": "    secrets: [spark_auth_secret]\nsecrets:\n  spark_auth_secret:\n    file: ./secrets/x\n"
        "  sql_token:\n    file: ./secrets/sql_token\n",
        "consumers.md": 'token = open("data/sql/token").read().strip()\n',
    }
    for name, text in safe.items():
        assert secret_looking_values(REPO / name, text) == [], name


def test_dot_env_is_ignored_by_git():
    result = subprocess.run(["git", "check-ignore", ".env"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == ".env"


def test_the_project_images_run_as_an_unprivileged_user():
    for dockerfile in REPO.glob("infra/*/Dockerfile"):
        users = re.findall(r"(?m)^USER\s+(\S+)", dockerfile.read_text())
        assert users and users[-1] not in ("0", "root"), f"{dockerfile.relative_to(REPO)} ends as {users[-1:]}"
