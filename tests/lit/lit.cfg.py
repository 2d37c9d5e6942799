# lit configuration of guardjit's guard-ir-opt tests.
import os
import sys

import lit.formats

config.name = "guardjit"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".gir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.guardjit_obj_root, "tests", "lit")

# guard-ir-opt and FileCheck by their plain names, as in LLVM's own tests.
path = [config.guardjit_tools_dir, os.path.dirname(config.filecheck)]
config.environment["PATH"] = os.pathsep.join(path + [os.environ.get("PATH", "")])
config.substitutions.append(("%guardjit_src", config.guardjit_src_root))
# The Python running lit, for tests that generate their input.
config.substitutions.append(("%python", '"' + sys.executable + '"'))
