"""`pip install --no-build-isolation .`: the Python package fasa (python/fasa), its module built by CMake
(python/CMakeLists.txt) for the interpreter running pip, and the bundled model beside it."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
MODEL = ROOT / "models" / "kjv-recall-f16.gguf"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        package_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent.parent  # holds fasa/
        build = Path(self.build_temp).resolve() / "cmake"
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                               "-DFASA_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}",
                               f"-DFASA_PYTHON_DIR={package_dir}"])
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_fasa", "-j", str(os.cpu_count() or 1)])


class WithModel(build_py):
    def run(self):
        super().run()
        models = Path(self.build_lib) / "fasa" / "models"
        models.mkdir(parents=True, exist_ok=True)
        shutil.copy2(MODEL, models / MODEL.name)


setup(
    name="fasa",
    version="0.1.0",
    description="Long-context decoding with Frequency-Aware Sparse Attention",
    packages=["fasa"],
    package_dir={"": "python"},
    ext_modules=[Extension("fasa._fasa", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": WithModel},
    options={"build": {"build_base": "build/pip"}},
    python_requires=">=3.9",
    zip_safe=False,
)
