"""The wheel holds a shared library with no Python ABI dependency, so one wheel serves every
CPython 3.x on the platform: tag it py3-none-<platform>."""

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel


class PythonAgnosticWheel(bdist_wheel):
    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"bdist_wheel": PythonAgnosticWheel})
