# A mask_mod of N terms: chain.py N FORM, FORM one of
#   and      kv < q + 1 && kv < q + 2 && ...           (one expression)
#   let-or   let x1 = x0 || kv < q + 1 ... return xN   (one let per term)
#   nested   !(kv < q + 1 && !(kv < q + 2 && ...))     (negations between)
#   mod      (q + kv) % 7 != 1 && ...                  (nothing folds)
import sys

n, form = int(sys.argv[1]), sys.argv[2]
terms = ["kv < q + %d" % (i + 1) for i in range(n)]
if form == "and":
    body = "= " + " && ".join(terms)
elif form == "let-or":
    lets = ["    let x0 = kv > q"] + ["    let x%d = x%d || %s" % (i + 1, i, t)
                                     for i, t in enumerate(terms)]
    body = "{\n%s\n    return x%d\n  }" % ("\n".join(lets), n)
elif form == "mod":
    body = "= " + " && ".join("(q + kv) %% 7 != %d" % (i + 1) for i in range(n))
elif form == "nested":
    e = terms[-1]
    for t in reversed(terms[:-1]):
        e = "!(%s && %s)" % (t, e)
    body = "= " + e
else:
    sys.exit("unknown form " + form)
print("variant v() {\n  mask_mod(b, h, q, kv) %s\n}" % body)
