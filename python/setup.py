"""Build of the clef Python package: bundles libclef.so into the wheel.

Where the library comes from, first that applies:
  CLEF_LIBRARY=/path/libclef.so   that file;
  CLEF_NO_BUNDLE=1                none: at run time the package finds an installed libclef
                                  (CLEF_LIBRARY, pkg-config, the loader's search path);
  otherwise                       `make BUILD=$CLEF_BUILD <build>/dist/libclef.so` in the clef
                                  repository this folder belongs to (or CLEF_SOURCE_DIR), build/ by
                                  default, CLEF_MAKE_JOBS jobs (default: every core).
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _repository():
    given = os.environ.get("CLEF_SOURCE_DIR")
    root = Path(given).resolve() if given else HERE.parent
    if (root / "include" / "clef.h").is_file() and (root / "Makefile").is_file():
        return root
    if given:
        raise SystemExit(f"clef: CLEF_SOURCE_DIR={given} is not a clef repository")
    return None


def _library():
    given = os.environ.get("CLEF_LIBRARY")
    if given:
        path = Path(given)
        if not path.is_file():
            raise SystemExit(f"clef: CLEF_LIBRARY={given} is not a file")
        return path
    if os.environ.get("CLEF_NO_BUNDLE") == "1":
        return None
    root = _repository()
    if root is None:
        print("clef: no repository and no CLEF_LIBRARY: the package will look for an installed libclef")
        return None
    build = Path(os.environ.get("CLEF_BUILD", "build"))
    if build.is_absolute():
        try:
            build = build.relative_to(root)
        except ValueError:
            pass
    jobs = os.environ.get("CLEF_MAKE_JOBS") or str(os.cpu_count() or 1)
    target = f"{build}/dist/libclef.so"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    subprocess.run(["make", "-C", str(root), f"-j{jobs}", f"BUILD={build}", target], check=True, env=env)
    return root / target


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = _library()
        if lib is not None:
            dest = Path(self.build_lib) / "clef" / "libclef.so"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lib.resolve(), dest)


cmdclass = {"build_py": BuildPy}
try:  # a wheel that holds a shared library is specific to the platform, not to the Python ABI
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:
    pass

setup(cmdclass=cmdclass)
