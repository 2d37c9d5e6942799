"""Compares an imported guard set with the recorder's Guard IR of the same
compile unit. Values and guards must agree field by field (operands by
source); object descriptions may differ only where the log does not carry
the object (ids, callables, dicts, states, the mode stack), which the
importer warns about. Prints a summary; exits 1 on any other difference.

    python compare-with-recorder.py RECORDED.gir IMPORTED.gir
"""
import re
import sys

# Objects the importer can only describe (it warns for each).
OPAQUE_KINDS = {"object", "callable", "dict", "state"}


def load(path):
    objects, values, specs, guards = {}, {}, {}, []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        m = re.match(r'object #(\d+) = (\w+)( strong)? "(.*)"$', line)
        if m:
            objects[m.group(1)] = (m.group(2), m.group(4))
            continue
        m = re.match(r"tensor (\d+) = pytype=#(\d+) (.*)$", line)
        if m:
            specs[m.group(1)] = (objects[m.group(2)][1], m.group(3))
            continue
        m = re.match(r'%(\d+) = (\w+)(?: %(\d+))?(.*?)source="(.*)"$', line)
        if m:
            attrs = re.sub(r"key=#\d+", "", m.group(4)).split()
            parent = values[m.group(3)][1] if m.group(3) else ""
            values[m.group(1)] = (m.group(2), m.group(5), parent, " ".join(attrs))
            continue
        m = re.match(r"guard (\w+)((?: %\d+,?)*)(.*)$", line)
        if not m:
            continue
        kind = m.group(1)
        ops = [values[o][1] for o in re.findall(r"%(\d+)", m.group(2))]
        rest = re.sub(r' (source|loc|verbose)=.*$', "", m.group(3))
        refs = {}

        def obj(mm):
            refs[mm.group(1)] = objects[mm.group(2)]
            return ""

        rest = re.sub(r"(object|aux)=#(\d+)", obj, rest)
        rest = re.sub(r"tensor=(\d+)", lambda mm: "tensor=" + " ".join(specs[mm.group(1)]), rest)
        guards.append((kind, tuple(ops), " ".join(rest.split()), refs))
    return sorted(values.values()), sorted(guards, key=lambda g: g[:3])


def main():
    rec_values, rec_guards = load(sys.argv[1])
    imp_values, imp_guards = load(sys.argv[2])
    ok = True
    if rec_values != imp_values:
        ok = False
        for v in sorted(set(rec_values) ^ set(imp_values)):
            print("value differs:", v)
    print(f"values: {len(rec_values)} recorded, {len(imp_values)} imported")
    same = described = 0
    if len(rec_guards) != len(imp_guards):
        ok = False
        print(f"guard count differs: {len(rec_guards)} vs {len(imp_guards)}")
    for r, i in zip(rec_guards, imp_guards):
        if r[:3] != i[:3]:
            ok = False
            print("guard differs:", r[:3], "|", i[:3])
            continue
        if r[3] == i[3]:
            same += 1
            continue
        # The importer may omit GLOBAL_STATE's optional state object.
        keys = set(r[3]) | set(i[3])
        for k in keys:
            a, b = r[3].get(k), i[3].get(k)
            if a == b:
                continue
            opaque = (a is None or a[0] in OPAQUE_KINDS or r[0] == "torch_function_mode_stack")
            if not (opaque and (b is None or a is None or a[0] == b[0])):
                ok = False
                print("guard object differs:", r[0], r[1], k, a, b)
        described += 1
    print(f"guards: {same} equal, {described} differ only in objects the log does not carry")
    sys.exit(0 if ok else 1)


main()
