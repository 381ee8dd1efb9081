"""fasa_retrieval's score, as `fasa eval retrieval` scores a task: the reply, leading whitespace removed,
starts with the answer."""


def process_results(doc, results):
    return {"acc": float(results[0].lstrip().startswith(doc["answer"]))}
