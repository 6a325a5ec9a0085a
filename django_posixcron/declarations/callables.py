"""The callable key: a dotted path that imports to a plain function; and its signature rule."""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from asgiref.sync import AsyncToSync
from asgiref.sync import iscoroutinefunction as is_async_function
from django.core.management import BaseCommand
from django.utils.module_loading import import_string

from django_posixcron.declarations.ids import (
    E_CALLABLE_IMPORT,
    E_CALLABLE_TYPE,
    E_NOT_CALLABLE,
    E_NOT_PLAIN_FUNCTION,
    E_SIGNATURE,
    W_UNCHECKED_SIGNATURE,
)
from django_posixcron.declarations.problems import Form, Invalid, KeyPath, show
from django_posixcron.declarations.values import plain

_R = TypeVar("_R")

CALLABLE_PATH_MAX_LENGTH = 255  # Task.callable_path max_length

# Enough for any real decorator stack; stops a __wrapped__ chain that loops or never ends.
MAX_WRAPPED_LAYERS = 100


def callable_path(value: object, path: KeyPath) -> str:
    """Return the dotted path of a callable that a call runs to completion."""
    if not isinstance(value, str) or "." not in value.strip(".") or value != value.strip():
        hint = 'Use the import path of a function, e.g. "myapp.jobs.nightly_report".'
        what = "a dotted path to a callable as a str"
        raise Invalid(E_CALLABLE_TYPE, Form.EXPECTED, what, hint)
    if len(value) > CALLABLE_PATH_MAX_LENGTH:
        raise Invalid(
            E_CALLABLE_TYPE,
            Form.GOT,
            f"is {len(value)} characters long; the database stores at most "
            f"{CALLABLE_PATH_MAX_LENGTH}",
            "Import the callable into a module with a shorter path (a jobs module of the "
            "project, say) and name it there.",
        )
    try:
        func = import_string(value)
    except KeyboardInterrupt:
        raise  # Ctrl-C while the checks import: the user's, not the module's
    except BaseException as error:
        nested = _attribute_of_attribute(value, error)
        if nested is not None:
            raise nested from None
        # Any exception: a module that raises while importing is as broken as a missing one;
        # a sys.exit() at import would otherwise end `manage.py check` with its text alone,
        # and a BaseException of the module's own with a traceback.
        raise Invalid(
            E_CALLABLE_IMPORT,
            Form.ASSIGNED,
            f"cannot be imported: {type(error).__name__}: {error}",
            "Check the module path and the attribute name, and that the module imports cleanly.",
        ) from None
    if not callable(func):
        raise Invalid(
            E_NOT_CALLABLE,
            Form.ASSIGNED,
            f"is not callable (it is {type(func).__name__} {show(func)}).",
            "Point it at a function or another callable.",
        )
    if inspect.isclass(func) and issubclass(func, BaseCommand):
        # A crontab's `manage.py send_reminders` line, moved here: "succeeded" at every run
        # while nothing ran.
        module, _, _ = value.rpartition(".")
        name = module.rpartition(".")[2] if ".management.commands." in module else "name"
        raise Invalid(
            E_NOT_PLAIN_FUNCTION,
            Form.ASSIGNED,
            "is a management command class; calling it only creates the command, which never runs.",
            'Declare "callable": "django.core.management.call_command" with "kwargs": '
            f'{{"command_name": "{name}", ...its options}}.',
        )
    if inspect.isclass(func) and any("__call__" in vars(k) for k in func.__mro__[:-1]):
        # A class whose constructor does the work is run by calling it; one whose instances
        # are callable was almost surely meant to be called as an instance.
        raise Invalid(
            E_NOT_PLAIN_FUNCTION,
            Form.ASSIGNED,
            "is a class whose instances are callable; calling the class only creates an "
            "instance, and its __call__ never runs.",
            "Declare a module-level instance of it, or a function that creates one and calls it.",
        )
    _refuse_async(func)
    if _is_generator_function(func):
        raise Invalid(
            E_NOT_PLAIN_FUNCTION,
            Form.ASSIGNED,
            "is a generator function; calling it does not run its body.",
            "Declare a plain function (no 'yield'), or one that consumes the generator.",
        )
    return plain(value)


def _attribute_of_attribute(dotted: str, error: BaseException) -> Invalid | None:
    """Return the problem of a path through an attribute of a module, if that is what failed.

    Only `module.attribute` paths are supported, as by Django's import_string(), which every
    process that runs the task resolves it with: "myapp.jobs.Holder.sm" is imported as the
    module "myapp.jobs.Holder", and the bare ImportError ("'myapp.jobs' is not a package")
    does not say that the class was found.
    """
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if not missing or not dotted.startswith(f"{missing}."):
        return None
    module_name, _, first = missing.rpartition(".")
    module = sys.modules.get(module_name)  # imported just now, as the missing one's parent
    if module is None:
        return None
    names = dotted[len(module_name) + 1 :].split(".")
    try:
        attribute = getattr(module, first)
    except Exception:
        return None  # no such attribute either: a module that does not exist
    inside = ".".join(names)
    if inspect.ismodule(attribute):
        # `from x import y` in the module: y is found there, but imports only as itself.
        own = f"{attribute.__name__}.{'.'.join(names[1:])}"
        detail = (
            f"cannot be imported: {first!r} in the module {module_name!r} is the module "
            f"{attribute.__name__!r} imported there, not a submodule of {module_name!r}."
        )
        return Invalid(E_CALLABLE_IMPORT, Form.ASSIGNED, detail, f'Use its own path, "{own}".')
    detail = (
        f"cannot be imported: {first!r} is not a module but an attribute of the module "
        f"{module_name!r}, and only 'module.attribute' paths are supported"
    )
    owner, found = module, attribute
    for depth, name in enumerate(names[1:], start=1):
        try:
            owner, found = found, getattr(found, name)
        except Exception:
            detail += f"; and {'.'.join(names[:depth])} has no attribute {name!r}"
            hint = (
                "Check the attribute names, then declare a module-level name for the callable "
                f'in {module_name}, and use "{module_name}.<name>".'
            )
            return Invalid(E_CALLABLE_IMPORT, Form.ASSIGNED, f"{detail}.", hint)
    if inspect.isclass(owner) and _is_instance_method(owner, names[-1]):
        hint = (
            f"{inside} is an instance method: calling it needs an instance of "
            f"{'.'.join(names[:-1])}. Declare a function in {module_name} that creates one "
            f"and calls its {names[-1]}(), and name that function."
        )
    else:
        hint = (
            f"Declare a module-level name for it in {module_name}, e.g. "
            f'{names[-1]} = {inside}, and use "{module_name}.{names[-1]}".'
        )
    return Invalid(E_CALLABLE_IMPORT, Form.ASSIGNED, f"{detail}.", hint)


def _is_instance_method(cls: type, name: str) -> bool:
    """Say whether `name` is a function the class binds to an instance (it needs `self`)."""
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return False
    return inspect.isfunction(raw)


def _per_callable(inspect_it: Callable[[Any], _R]) -> Callable[[Any], _R]:
    """Remember what inspecting a callable said, per callable object.

    Thousands of tasks often share a few callables; inspecting each callable once instead of
    once per task is most of what collecting 100,000 declarations costs. A callable that
    cannot be a dict key (an object defining __eq__ alone) is inspected every time.
    """
    cached = functools.lru_cache(maxsize=4096)(inspect_it)

    def inspected(func: Any) -> _R:
        try:
            return cached(func)
        except TypeError:
            return inspect_it(func)

    return inspected


@_per_callable
def _is_generator_function(func: Any) -> bool:
    return inspect.isgeneratorfunction(func)


@_per_callable
def _signature(func: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None  # some builtins have none: nothing to check against


def _refuse_async(func: object) -> None:
    """Refuse a callable whose call only creates a coroutine: the run would "succeed" unrun.

    (executors.py refuses such a result too, for what no check can see.)
    """
    found = _cached_async_kind(func)
    if found is None:
        return
    what, wrapped = found
    hint = (
        "Declare a plain function; it may call asgiref.sync.async_to_sync(your_coroutine)"
        "(**kwargs)."
    )
    if wrapped:
        hint += (
            " If the wrapper does run the coroutine to completion, declare a plain function "
            "(without functools.wraps) that calls it."
        )
    raise Invalid(E_NOT_PLAIN_FUNCTION, Form.ASSIGNED, f"{what}.", hint)


def _async_kind(func: object) -> tuple[str, bool] | None:
    """Say what in `func` is async (and whether behind a wrapper); None if nothing is."""
    layer = func
    for depth in range(MAX_WRAPPED_LAYERS):
        if isinstance(layer, AsyncToSync):
            return None  # async_to_sync(f) runs the coroutine to completion: the fix we advise
        # asgiref's test also sees sync_to_async(f) and markcoroutinefunction(f), which
        # inspect's does not on Python 3.11; an object's __call__ lives on its class.
        call = type(layer).__call__ if callable(layer) else None
        if is_async_function(layer) or inspect.isasyncgenfunction(layer):
            kind = "an async function"
        elif is_async_function(call) or inspect.isasyncgenfunction(call):
            kind = f"a callable object ({type(layer).__qualname__}) whose __call__ is async"
        else:
            try:
                layer = layer.__wrapped__  # type: ignore[attr-defined]
            except Exception:
                return None
            continue
        if depth == 0:
            return f"is {kind}; calling it does not run its body", False
        # A sync wrapper (functools.wraps, transaction.atomic, a logging decorator) around an
        # async function almost always returns the coroutine it created without awaiting it.
        name = getattr(layer, "__qualname__", None) or type(layer).__qualname__
        module = getattr(layer, "__module__", None)
        what = (
            f"wraps {kind}, {f'{module}.{name}' if module else name} (found through "
            "__wrapped__), without being async itself; calling it returns the coroutine without "
            "running it"
        )
        return what, True
    return None


_cached_async_kind = _per_callable(_async_kind)


def takes_kwargs(values: Mapping[str, Any]) -> None:
    """Refuse kwargs that the callable's signature cannot bind (after the context, if taken)."""
    dotted, kwargs = values["callable"], values["kwargs"]
    func = import_string(dotted)
    context = bool(values.get("takes_context", False))
    error = _bind_error(func, tuple(kwargs), context)
    if error is None:
        return
    callee = _callee(func)
    assert callee is not None  # no signature, no error
    name = dotted.rsplit(".", 1)[-1]
    first: list[str] = []  # what the call passes before the kwargs
    if callee.partial_of is not None:
        bound = ", ".join(
            [*map(show, callee.args), *(f"{k}={show(v)}" for k, v in callee.keywords.items())]
        )
        first.append(f"the arguments its functools.partial binds ({bound})")
    if context:
        first.append("a RunContext" if first else "a RunContext first")
    called = f"{', '.join(first)} and " if first else ""
    match = f"Make the kwargs match the signature {name}{callee.signature}."
    if callee.partial_of is not None:
        inner = callee.partial_of
        inner_name = getattr(inner, "__qualname__", None) or type(inner).__qualname__
        match = (
            f"Make the arguments the partial binds and the kwargs, together, match the "
            f"signature {inner_name}{callee.signature}."
        )
    clash = _context_parameter(callee) if context else None
    if clash is not None and clash in kwargs:
        # The RunContext goes to the parameter the kwargs name too: "multiple values".
        hint = (
            "With takes_context, the RunContext is passed as the first positional argument, "
            f"to the parameter {clash!r}; the kwargs key {clash!r} clashes with it. Rename "
            "the key (and the parameter it is meant for), or remove it."
        )
    elif context and _bind_error(func, tuple(kwargs), False) is None:
        # The kwargs fit; the context has no parameter to go to.
        hint = (
            "With takes_context, the callable gets the RunContext as its first positional "
            f"argument: give {name} a parameter for it, e.g. def {name}(context, ...)."
        )
    else:
        hint = match
        positional, unknown = _misnamed(callee.signature, kwargs)
        if positional:
            some = "it" if len(positional) == 1 else "them"
            hint += (
                f" {', '.join(map(repr, positional))} "
                f"{'is' if len(positional) == 1 else 'are'} positional-only: kwargs are "
                f"passed by keyword. Declare a function that takes {some} by keyword and "
                f"passes {some} on by position."
            )
        if unknown:
            hint += f" It has no parameter {', '.join(map(repr, unknown))}."
    raise Invalid(
        E_SIGNATURE,
        Form.ASSIGNED,
        f"cannot be called with {called}the declared kwargs {show(kwargs)}: {error}.",
        hint,
    )


def unchecked_call(dotted: str, kwargs: Mapping[str, Any], context: bool) -> Invalid | None:
    """Return the warning for a call no signature can be read to check, if it passes anything.

    Many builtins have none (time.sleep on Python 3.11): their kwargs pass the checks, and a
    name they do not take fails every run with TypeError. A call without arguments is not
    worth a warning: it is the one call such a callable is most likely meant for.
    """
    if (not kwargs and not context) or _callee(import_string(dotted)) is not None:
        return None
    passed = [f"the kwargs {show(kwargs)}"] if kwargs else []
    if context:
        passed.insert(0, "a RunContext first" if kwargs else "a RunContext")
    what = " and ".join(passed)
    return Invalid(
        W_UNCHECKED_SIGNATURE,
        Form.ASSIGNED,
        "has no signature the checks can read (a builtin, say): the call with "
        f"{what} cannot be checked against it, and if it does not fit, every run fails "
        "with TypeError.",
        "Builtins often take their arguments by position only, which kwargs cannot give. "
        f"Check the documentation of {dotted}, or declare a Python function that calls it.",
    )


def _misnamed(
    signature: inspect.Signature, names: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """Return the kwargs that name a positional-only parameter, and those naming none.

    With **kwargs in the signature, a key named like a positional-only parameter goes there,
    not to it; no key is unknown.
    """
    params = signature.parameters
    positional = [
        n for n in names if n in params and params[n].kind is inspect.Parameter.POSITIONAL_ONLY
    ]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return positional, []
    return positional, [n for n in names if n not in params]


class _Callee(NamedTuple):
    """What a call binds against: a signature, after the arguments a partial binds first."""

    signature: inspect.Signature
    args: tuple[Any, ...] = ()
    keywords: Mapping[str, Any] = types.MappingProxyType({})
    partial_of: Any = None


@_per_callable
def _callee(func: Any) -> _Callee | None:
    signature = _signature(func)
    if signature is not None:
        return _Callee(signature)
    if isinstance(func, functools.partial):
        # inspect reads no signature of a partial whose bound arguments do not fit its
        # function: bind them against the function's own, so that the mistake is an error now
        # rather than a TypeError at every run.
        inner = _signature(func.func)
        if inner is not None:
            return _Callee(inner, func.args, types.MappingProxyType(func.keywords), func.func)
    return None  # some builtins have none: nothing to check against


def _context_parameter(callee: _Callee) -> str | None:
    """Return the parameter the RunContext binds to, the first positional argument."""
    marker = object()
    try:
        bound = callee.signature.bind_partial(*callee.args, marker)
    except TypeError:
        return None
    return next((n for n, v in bound.arguments.items() if v is marker), None)


def _bind_error(func: Any, names: tuple[str, ...], context: bool) -> str | None:
    """Return why the signature cannot bind these keyword names, or None when it can.

    Whether a call binds depends on the names alone, not on the values: tasks that share a
    callable and their kwargs' names (in the declared order, which the error follows) are
    checked once.
    """
    try:
        return _cached_bind_error(func, names, context)
    except TypeError:  # a callable that cannot be a dict key
        return _find_bind_error(func, names, context)


def _find_bind_error(func: Any, names: tuple[str, ...], context: bool) -> str | None:
    callee = _callee(func)
    if callee is None:
        return None  # checks.py warns that the kwargs could not be checked (posixcron.W003)
    args = (*callee.args, *(("context",) if context else ()))
    try:
        callee.signature.bind(*args, **{**callee.keywords, **dict.fromkeys(names)})
    except TypeError as error:
        return str(error)
    return None


_cached_bind_error = functools.lru_cache(maxsize=4096)(_find_bind_error)
