# Sourced by the training pipelines (train_k3_mini.sh, train_k3_mini_vision.sh, sft_k3_mini_chat.sh,
# post_train_k3_mini_chat.sh) after they set WORK: Debian's torch links the netlib reference BLAS
# (~15x slower), so Debian's libopenblas0-pthread package is downloaded (apt-get download, no
# system change), unpacked under $WORK/openblas and put first on LD_LIBRARY_PATH for the
# pipeline's processes only. K3_OPENBLAS_DIR=DIR uses another copy; K3_OPENBLAS_DIR=none keeps
# netlib. Then one thread for torch and OpenBLAS, and the repository root on PYTHONPATH.
if [ -z "${K3_OPENBLAS_DIR:-}" ]; then
  ob="$WORK/openblas"
  if [ ! -d "$ob/usr/lib/x86_64-linux-gnu/openblas-pthread" ]; then
    mkdir -p "$ob" && (cd "$ob" && apt-get download -qq libopenblas0-pthread >/dev/null &&
      dpkg-deb -x libopenblas0-pthread_*.deb .) || echo "$0: could not fetch OpenBLAS; using netlib BLAS (slow)"
  fi
  K3_OPENBLAS_DIR="$ob/usr/lib/x86_64-linux-gnu/openblas-pthread"
fi
if [ "$K3_OPENBLAS_DIR" != none ] && [ -d "$K3_OPENBLAS_DIR" ]; then
  export LD_LIBRARY_PATH=$K3_OPENBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=.
