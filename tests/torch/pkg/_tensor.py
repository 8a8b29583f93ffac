"""The stand-in's backward, in the file autograd's entry is in (torch/_tensor.py): what
memtap's composition reads a stack's frames by."""


def backward(make_grads):
    return make_grads()
