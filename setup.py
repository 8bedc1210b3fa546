"""spt-jax: self-pretraining (SPT) of sequence classifiers in JAX/Flax."""
from setuptools import find_packages, setup

setup(
    name="spt_jax",
    version="0.1.0",
    description="Self-pretraining of Transformer sequence classifiers (LRA and beyond) in JAX/Flax.",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["spt_jax", "spt_jax.*"]),
    # jax 0.10 needs Python >= 3.11 (TPU VM images ship 3.10: launch/tpu_pod.sh setup installs one).
    python_requires=">=3.11",
    license="Apache-2.0",
    install_requires=[
        "jax>=0.10",
        "flax>=0.12",
        "optax>=0.2.8",
        "orbax-checkpoint>=0.12",
        "etils[epath]>=1.7",   # every workdir file, local or a gs:// URL
        "tensorflow-datasets>=4.9",
        "ml-collections>=1.1",
        "absl-py>=2.1",
        "numpy>=2.0",
        "tqdm>=4.66",          # progress bars with rate and ETA
        "tensorboardX>=2.6",   # TensorBoard event files without TensorFlow
        "pillow>=10",          # Pathfinder PNGs (read and generated)
        "matplotlib>=3.8",     # attention heatmaps, sweep and theory plots
    ],
    extras_require={
        # pytest-xdist: the suite is compile-bound and XLA compiles a program on one core, so one
        # worker per core (pytest.ini) is what keeps it inside its time budget on 2 cores.
        # wandb: the W&B logging test runs in the suite, offline. submitit: the SLURM backend's
        # tests drive it through submitit's local executor.
        "test": ["pytest>=8", "pytest-xdist>=3.5", "wandb>=0.17", "submitit>=1.5"],
        # Optional logging to Weights & Biases (main.py --wandb_project); never imported otherwise.
        "wandb": ["wandb>=0.17"],
        # Sweeps as SLURM jobs (python -m spt_jax.sweep --backend=slurm); never imported otherwise.
        "slurm": ["submitit>=1.5"],
        # gs:// workdirs: gcsfs is etils.epath's way there (and so Orbax's), google-cloud-storage
        # tensorboardX's and Orbax's bucket queries.
        "gcs": ["gcsfs>=2024.2", "google-cloud-storage>=2.14"],
        # Benchmarks only: the PyTorch reference model (the CPU wheel these machines carry on disk).
        "bench": ["torch==2.13.0"],
        # Accelerators: the base install's jax runs on CPUs only. JAX's own extras bring the matching
        # jaxlib and the device runtime, pinned to the jax every result here was made with, so that
        # an install cannot move jax under a run. `cuda`: NVIDIA GPUs through jax[cuda12] (the
        # CUDA 12 plugin with its pip-installed CUDA, cuDNN and NCCL; driver >= 525; cuDNN is what
        # attention='auto' uses there). `tpu`: Cloud TPU VMs through jax[tpu] (libtpu).
        "cuda": ["jax[cuda12]==0.10.2"],
        "tpu": ["jax[tpu]==0.10.2"],
    },
)
