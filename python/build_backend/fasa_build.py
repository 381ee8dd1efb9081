"""The PEP 517 backend behind `pip install .`: CMake builds the module fasa._fasa (python/CMakeLists.txt)
for the interpreter running pip, and the wheel holds it, python/fasa's files and the bundled model.

In-tree and needing nothing but the standard library, so that the install works offline and on any
interpreter (a pyenv or conda Python has no setuptools' `wheel`, and the machines reach no PyPI)."""
import base64
import hashlib
import io
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME, VERSION = "fasa", "0.1.0"
MODEL = ROOT / "models" / "kjv-recall-f16.gguf"
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Long-context decoding with Frequency-Aware Sparse Attention
Requires-Python: >=3.9
"""


def _tag():
    """The one interpreter and platform the module was compiled for, e.g. cp311-cp311-linux_x86_64."""
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{py}-{py}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def _dist_info():
    return f"{NAME}-{VERSION}.dist-info"


def _dist_info_files():
    return {"METADATA": METADATA,
            "WHEEL": f"Wheel-Version: 1.0\nGenerator: fasa_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"}


def _build_folder():
    """Outside the source tree (which may be read-only, and is not pip's to fill): one folder per
    checkout and interpreter under the user's cache, so that installing again builds only what changed."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    return cache / "fasa" / "pip-build" / f"{checkout}-{_tag()}"


def _build_module():
    """Configures and builds the module; returns the module's file."""
    build = _build_folder()
    subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                           "-DFASA_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"])
    subprocess.check_call(["cmake", "--build", str(build), "--target", "_fasa", "-j", str(os.cpu_count() or 1)])
    return build / "python" / "fasa" / ("_fasa" + sysconfig.get_config_var("EXT_SUFFIX"))


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


# ---- the hooks pip calls ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = Path(metadata_directory) / _dist_info()
    info.mkdir(parents=True, exist_ok=True)
    for name, text in _dist_info_files().items():
        (info / name).write_text(text)
    return info.name


def get_requires_for_build_sdist(config_settings=None):
    return []


SDIST_SKIPPED = {".git", "__pycache__", ".venv"}  # and build*/ folders: outputs


def build_sdist(sdist_directory, config_settings=None):
    """The source tree (no build outputs) with PKG-INFO, from which build_wheel builds the same wheel."""
    name = f"{NAME}-{VERSION}"
    sdist = Path(sdist_directory) / f"{name}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for path in sorted(ROOT.iterdir()):
            if path.name not in SDIST_SKIPPED and not path.name.startswith(("build", "eval-")):
                tar.add(path, f"{name}/{path.name}", filter=lambda t: None if Path(t.name).name in SDIST_SKIPPED else t)
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return sdist.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    module = _build_module()
    files = {f"fasa/{p.name}": p for p in sorted((ROOT / "python" / "fasa").glob("*.py"))}
    files[f"fasa/{module.name}"] = module
    files[f"fasa/models/{MODEL.name}"] = MODEL
    info = _dist_info()
    wheel = Path(wheel_directory) / f"{NAME}-{VERSION}-{_tag()}.whl"
    records = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arcname, data):
            z.writestr(arcname, data)
            records.append(_record_line(arcname, data))
        for arcname, path in files.items():
            add(arcname, path.read_bytes())
        add(f"{info}/LICENSE", (ROOT / "LICENSE").read_bytes())
        for name, text in _dist_info_files().items():
            add(f"{info}/{name}", text.encode())
        records.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return wheel.name
