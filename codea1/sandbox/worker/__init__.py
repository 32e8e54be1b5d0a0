"""The worker side of the sandbox: every module that runs inside a sandboxed worker process.

A worker starts as ``python -I -S -c`` :data:`codea1.sandbox.local._BOOT`, which imports
:mod:`~codea1.sandbox.worker.zygote` and nothing else; the modules it reaches are the ones here:

* :mod:`~codea1.sandbox.worker.zygote`: the outer process, the zygote and the job runner R;
* :mod:`~codea1.sandbox.worker.program`: the program process P and its test children C;
* :mod:`~codea1.sandbox.worker.harness`: the harness process H of a check job;
* :mod:`~codea1.sandbox.worker.isolation`, :mod:`~codea1.sandbox.worker.minimal_root`,
  :mod:`~codea1.sandbox.worker.landlock`, :mod:`~codea1.sandbox.worker.seccomp` and
  :mod:`~codea1.sandbox.worker.probe`: the kernel layers these processes put themselves under;
* :mod:`~codea1.sandbox.worker.value_codec`: the typed encoding of returned values, written here
  and decoded on both sides.

Rule: these modules import only the standard library and each other, never the rest of codea1 nor
a third-party package (contracts in ``.importlinter``). The worker is lean so that its forks are
cheap (docs/sandbox.md, "What a pair costs"), and what runs beside untrusted code depends on
nothing but the interpreter. The trusted host side (:mod:`codea1.sandbox`) may import from here
(the value codec, the layer status strings, the worker environment, the scratch wipe); nothing
here imports the host side. This file holds no imports: the worker imports it at boot.
"""
