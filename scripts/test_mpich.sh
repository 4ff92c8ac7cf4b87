#!/usr/bin/env bash
# Builds k3 against MPICH (Debian's mpich + libmpich-dev, installed here when missing) in
# build-mpich/ and runs the distributed cases of tests/mpi/mpi_cases.py under MPICH's mpiexec:
# the code uses the MPI standard API only, and this shows it. Not part of CI (scripts/test.sh).
# Usage: scripts/test_mpich.sh [CASE...]   (default: every case; CMAKE_ARGS: more cmake flags, e.g.
# -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mpicxx.mpich >/dev/null 2>&1 || ! command -v mpiexec.mpich >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends mpich libmpich-dev >/dev/null
fi
# FindMPI takes MPICH's compiler wrapper; the Debian alternatives (mpicxx, mpirun) may stay Open MPI's.
cmake -S . -B build-mpich -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_MPI=ON -DMPI_CXX_COMPILER=mpicxx.mpich \
      -DMPIEXEC_EXECUTABLE="$(command -v mpiexec.mpich)" -DK3_BUILD_TESTS=OFF -DK3_BUILD_BENCH=OFF \
      ${CMAKE_ARGS:-} >/dev/null
cmake --build build-mpich -j "$(nproc)" --target k3
if ! ldd build-mpich/tools/cli/k3 | grep -q libmpich; then
  echo "test_mpich.sh: build-mpich/tools/cli/k3 is not linked against MPICH" >&2
  exit 1
fi
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
K3_MPIEXEC=mpiexec.mpich "$PY" tests/mpi/mpi_cases.py --k3 build-mpich/tools/cli/k3 --work build-mpich/mpi-cases "$@"
