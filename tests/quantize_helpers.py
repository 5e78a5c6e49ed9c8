"""What the rewrite tests share: the fake quants a rewrite inserted, and a Session with the graph's
variables initialized."""
import fqcore.graph as G

FQ_TYPES = {"FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel", "FakeQuantWithMinMaxArgs"}


def fake_quants(g):
    """{quantizer prefix ('conv/act_quant'): its FakeQuant op}."""
    return {op.name.rsplit("/", 1)[0]: op for op in g.get_operations() if op.type in FQ_TYPES}


def session(g):
    with g.as_default():
        init = G.global_variables_initializer()
    s = G.Session(g)
    s.run(init)
    return s
