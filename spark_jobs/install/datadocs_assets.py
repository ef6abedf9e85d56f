"""Great Expectations' Data Docs without the internet.

GX's pages take jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega from CDNs: opened
offline, the index is an unstyled page with an empty results list. ``fetch`` gets the
packages once (``npm pack`` of the versions pinned in infra/datadocs/lock.txt, each
checked against its sha512); ``bundle`` copies the files a site uses into its
``static/vendor/`` and points every page at them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from spark_jobs.errors import SigflowError

LOCK = Path(__file__).resolve().parents[2] / "infra" / "datadocs" / "lock.txt"

# The end of each CDN link on GX's pages -> (npm package, the same file inside it). GX
# links filter-control's CSS of 1.19.0 beside bootstrap-table 1.19.1: 1.19.1's serves both.
FILES = {
    "jquery-3.7.1.min.js": ("jquery", "dist/jquery.min.js"),
    "popper.js/1.12.9/umd/popper.min.js": ("popper.js", "dist/umd/popper.min.js"),
    "bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap", "dist/js/bootstrap.min.js"),
    "bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap", "dist/css/bootstrap.min.css"),
    "bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table", "dist/bootstrap-table.min.js"),
    "bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table", "dist/bootstrap-table.min.css"),
    "filter-control/bootstrap-table-filter-control.min.js":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "filter-control/bootstrap-table-filter-control.min.css":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "filter-control/bootstrap-table-filter-control.css":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("bootstrap-datepicker", "dist/js/bootstrap-datepicker.min.js"),
    "bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("bootstrap-datepicker", "dist/css/bootstrap-datepicker.min.css"),
    "font-awesome/6.6.0/css/all.min.css": ("@fortawesome/fontawesome-free", "css/all.min.css"),
    "bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark", "dist/css/bootstrap-prefers-dark.css"),
    "npm/vega@5": ("vega", "build/vega.min.js"),
    "npm/vega-lite@5": ("vega-lite", "build/vega-lite.min.js"),
    "npm/vega-embed@6": ("vega-embed", "build/vega-embed.min.js"),
}
# Font Awesome's CSS loads its fonts from ../webfonts/
DIRECTORIES = {"@fortawesome/fontawesome-free": ["webfonts"]}
_LINK = re.compile(r'(src|href)="(https://[^"]+)"')
# GX's logos, fetched from its web host with the project's id in the query: the site's own copy
_LOGO = re.compile(r"https://[^\"')\s]+/(?:logo-long|full_logo_dark)\.png[^\"')\s]*")
_SRI = re.compile(r'\s+(integrity="[^"]*"|crossorigin="[^"]*")')  # file:// has no CORS to satisfy


def default_dir() -> Path:
    return Path(sys.prefix) / "share" / "sigflow" / "datadocs"


def pinned() -> dict[str, tuple[str, str]]:
    """package -> (version, integrity) from the lock file."""
    out = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            spec, integrity = line.split()
            name, version = spec.rsplit("@", 1)
            out[name] = (version, integrity)
    return out


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(dest: Path | None = None) -> list[str]:
    """Fetch and check every pinned package not there yet; one line per package."""
    dest = dest or default_dir()
    npm = shutil.which("npm")
    lines = []
    for name, (version, integrity) in pinned().items():
        target = dest / name
        if (target / ".integrity").exists() and (target / ".integrity").read_text() == integrity:
            continue
        if npm is None:
            raise SigflowError("npm not found: Data Docs pages would need the internet for their JS and CSS",
                               "install Node.js (apt-get install npm), then `sigflow quality assets`")
        with tempfile.TemporaryDirectory() as tmp:
            packed = subprocess.run([npm, "pack", f"{name}@{version}", "--json", "--pack-destination", tmp],
                                    capture_output=True, text=True, cwd=tmp)
            if packed.returncode != 0:
                raise SigflowError(f"npm could not fetch {name}@{version}: {packed.stderr.strip().splitlines()[-1:]}",
                                   "check the npm registry is reachable, then `sigflow quality assets`")
            tarball = Path(tmp) / json.loads(packed.stdout)[0]["filename"]
            if _integrity(tarball) != integrity:
                raise SigflowError(f"{name}@{version} does not match infra/datadocs/lock.txt",
                                   "the download was altered or the lock is wrong; nothing was installed")
            shutil.rmtree(target, ignore_errors=True)
            with tarfile.open(tarball) as archive:
                archive.extractall(Path(tmp) / "x", filter="data")
            shutil.move(Path(tmp) / "x" / "package", target)
        (target / ".integrity").write_text(integrity)
        lines.append(f"{name}@{version}: fetched and checked")
    return lines or [f"Data Docs assets: all {len(pinned())} packages in place ({dest})"]


def bundle(site: Path, assets: Path | None = None) -> int:
    """Point every page of a Data Docs site at local copies of its CDN files and logos;
    returns the number of pages changed. Without the fetched packages the pages keep their
    links (and need the internet)."""
    assets = assets or default_dir()
    if not all((assets / name / ".integrity").exists() for name in pinned()):
        return 0
    vendor = site / "static" / "vendor"
    for name, inner in FILES.values():
        _copy(assets / name / inner, vendor / name / inner)
    for name, directories in DIRECTORIES.items():
        for directory in directories:
            if not (vendor / name / directory).exists():
                shutil.copytree(assets / name / directory, vendor / name / directory)
    changed = 0
    for page in site.rglob("*.html"):
        text = page.read_text()
        local = _LINK.sub(lambda m: _local(m, vendor, page.parent), text)
        local = _LOGO.sub(os.path.relpath(site / "static" / "images" / "logo-long.png", page.parent), local)
        if local != text:
            page.write_text(_SRI.sub("", local))
            changed += 1
    return changed


def _copy(source: Path, target: Path) -> None:
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _local(link: re.Match, vendor: Path, page_dir: Path) -> str:
    url = link.group(2)
    for tail, (name, inner) in FILES.items():
        if url.endswith(tail):
            return f'{link.group(1)}="{os.path.relpath(vendor / name / inner, page_dir)}"'
    return link.group(0)
